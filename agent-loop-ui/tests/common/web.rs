//! Loopback HTTP servers for the web front-end tests, and the Node.js scripts (tests/js/)
//! that drive the real clients against them. The npm packages are the workspace's, in the
//! repository root's node_modules (`npm ci` there).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Serves `router` on a free loopback port; gives its base URL (`http://127.0.0.1:PORT`). The
/// server runs until the test's runtime ends.
pub async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        axum::serve(listener, router)
            .await
            .expect("the test server runs");
    });
    format!("http://{addr}")
}

pub use super::shared::web::node_available;

/// Runs `node tests/js/{script} {args…}` (in agent-loop-ui/; node finds the packages in the
/// repository root's node_modules, a parent folder) and gives its standard output parsed as
/// JSON; the script's standard error is shown. Panics, with both outputs, when the script fails.
/// Async (the script runs on a blocking thread) so that the test's server keeps serving.
pub async fn node_json(script: &str, args: &[&str]) -> serde_json::Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("tests/js").join(script);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new("node")
            .arg(&path)
            .args(&args)
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("node runs")
    })
    .await
    .expect("the script's thread");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "node tests/js/{script} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    if !stderr.is_empty() {
        eprintln!("{stderr}");
    }
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("node tests/js/{script} printed no JSON ({e}):\n{stdout}\n--- stderr\n{stderr}")
    })
}
