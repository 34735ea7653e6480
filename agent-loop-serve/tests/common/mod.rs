//! Helpers of agent-loop-serve's tests: loopback servers, and the official clients (Python in
//! the venv `.ci/run` makes from scripts/serve-requirements.txt; Node.js from the root's
//! node_modules) driven against them.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `add`: adds its input's `a` and `b` (the served agents' one tool).
pub fn add_tool() -> impl agent_loop::Tool {
    agent_loop::tool::FnTool::new("add", "Adds a and b.", |input: serde_json::Value, _ctx| {
        let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
        std::future::ready(Ok::<_, agent_loop::ToolError>(sum.to_string()))
    })
}

/// Serves `router` on a free loopback port; gives its base URL (`http://127.0.0.1:PORT`).
pub async fn serve(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("its address");
    tokio::spawn(async move {
        // With the peer's address: a service with no authenticator serves loopback peers only.
        let app = router.into_make_service_with_connect_info::<std::net::SocketAddr>();
        axum::serve(listener, app)
            .await
            .expect("the test server runs");
    });
    format!("http://{addr}")
}

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

/// The python of the venv with the pinned clients (`AGENT_LOOP_SERVE_PYTHON`), when it is
/// there and imports `import_name`. In CI (`CI=true`) a missing one fails the test; elsewhere
/// the test is skipped with a loud message (`None`).
pub fn python(import_name: &str) -> Option<String> {
    let python = std::env::var("AGENT_LOOP_SERVE_PYTHON").ok();
    let why = match &python {
        None => "AGENT_LOOP_SERVE_PYTHON is not set".to_owned(),
        Some(p) => match Command::new(p)
            .args(["-c", &format!("import {import_name}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
        {
            Ok(s) if s.success() => return python,
            _ => format!("{p} cannot import {import_name}"),
        },
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!(
            "{why}: CI must run this test against the official client. Make the venv: \
             python3 -m venv v && v/bin/pip install -r scripts/serve-requirements.txt, and \
             export AGENT_LOOP_SERVE_PYTHON=$PWD/v/bin/python"
        );
    }
    say_skipped(&format!(
        "!!!!! SKIPPED: {why}, so the official Python client is not run. Make the venv \
         (python3 -m venv v && v/bin/pip install -r scripts/serve-requirements.txt) and set \
         AGENT_LOOP_SERVE_PYTHON=$PWD/v/bin/python to run it. !!!!!"
    ));
    None
}

/// Runs `python tests/py/{script} {args…}` and gives its standard output parsed as JSON;
/// panics with both outputs when the script fails. Async (a blocking thread) so the test's
/// server keeps serving.
pub async fn python_json(python: &str, script: &str, args: &[&str]) -> serde_json::Value {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let path = root.join("tests/py").join(script);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let python = python.to_owned();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python)
            .arg(&path)
            .args(&args)
            .current_dir(&root)
            .stdin(Stdio::null())
            .output()
            .expect("python runs")
    })
    .await
    .expect("the script's thread");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "tests/py/{script} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("tests/py/{script} printed no JSON ({e}):\n{stdout}\n--- stderr\n{stderr}")
    })
}

/// Whether `node` runs and the root's node_modules holds the MCP SDK. In CI a missing one
/// fails the test; elsewhere the test is skipped with a loud message (`false`).
pub fn node() -> bool {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let sdk = root.join("node_modules/@modelcontextprotocol/sdk/package.json");
    let runs = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if runs && sdk.exists() {
        return true;
    }
    let why = if runs {
        "the root's node_modules has no @modelcontextprotocol/sdk (run npm ci in the repository root)"
    } else {
        "node is not installed"
    };
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}: CI must run this test against the official TypeScript MCP client");
    }
    say_skipped(&format!(
        "!!!!! SKIPPED: {why}, so the official TypeScript MCP client is not run. !!!!!"
    ));
    false
}

/// Runs `node tests/js/{script} {args…}` and gives its standard output parsed as JSON; panics
/// with both outputs when the script fails.
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
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!("node tests/js/{script} printed no JSON ({e}):\n{stdout}\n--- stderr\n{stderr}")
    })
}
