//! A durable agent run that survives a crash, in one command:
//!
//! ```text
//! npm ci --prefix agent-loop-restate
//! cargo run -p agent-loop-restate --example durable
//! ```
//!
//! It starts a local restate-server from the npm package, a worker process serving the
//! `AgentSession` object, registers the worker, and starts a session. When the model's tool
//! call is running, it kills the worker with SIGKILL, starts it again, and shows the run
//! finishing: the model call already made is not made again, and the interrupted tool runs
//! again with the same idempotency key. The model is the crate's loopback mock, so no key is
//! needed; with `ANTHROPIC_API_KEY` set the worker talks to the real model instead (and the
//! kill happens only if the model calls the `step` tool).

#[path = "../src/bin/agent-loop-restate-worker.rs"]
mod worker;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use agent_loop::testing::{MockServer, ScriptedResponse};
use serde_json::json;

fn main() {
    if std::env::var_os("DURABLE_EXAMPLE_WORKER").is_some() {
        return worker::main();
    }
    tokio::runtime::Runtime::new()
        .expect("a runtime")
        .block_on(demo());
}

fn port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn server_binary() -> PathBuf {
    let scope = Path::new(env!("CARGO_MANIFEST_DIR")).join("node_modules/@restatedev");
    std::fs::read_dir(&scope)
        .ok()
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin/restate-server"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            eprintln!("restate-server is not installed: run `npm ci --prefix agent-loop-restate`");
            std::process::exit(2)
        })
}

/// A child process (restate-server or a worker) that is killed and reaped when this guard is
/// dropped: on every way out of the example, a panic midway included, so that none outlives it.
struct KillOnDrop(Child);

impl KillOnDrop {
    fn id(&self) -> u32 {
        self.0.id()
    }

    /// SIGKILL, then reap it (no zombie).
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The example's temp directory (config, server data, tool log), removed on drop, after the
/// processes using it (declared later, so dropped first) are gone.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn spawn_worker(addr: &str, model: Option<&str>, tools: &Path) -> KillOnDrop {
    let mut command = Command::new(std::env::current_exe().expect("this program"));
    command
        .env("DURABLE_EXAMPLE_WORKER", "1")
        .env("WORKER_ADDR", addr)
        .env("TOOL_DIR", tools)
        .stdin(Stdio::null());
    if let Some(model) = model {
        command.env("MODEL_BASE_URL", model);
    }
    KillOnDrop(command.spawn().expect("start the worker"))
}

async fn wait_for(what: &str, mut check: impl FnMut() -> bool) {
    for _ in 0..6000 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

async fn demo() {
    let dir =
        TempDir(std::env::temp_dir().join(format!("agent-loop-durable-{}", std::process::id())));
    let tools = dir.0.join("tools");
    std::fs::create_dir_all(&tools).expect("temp dir");
    let (admin, ingress, node, worker_port) = (port(), port(), port(), port());
    let config = format!(
        "default-num-partitions = 2\ndisable-telemetry = true\nbind-address = \"127.0.0.1:{node}\"\n\
         advertised-address = \"http://127.0.0.1:{node}/\"\n[default-retry-policy]\n\
         initial-interval = \"20ms\"\nmax-interval = \"200ms\"\nmax-attempts = 10000\n\
         on-max-attempts = \"kill\"\n[admin]\nbind-address = \"127.0.0.1:{admin}\"\n\
         [ingress]\nbind-address = \"127.0.0.1:{ingress}\"\n"
    );
    std::fs::write(dir.0.join("config.toml"), config).expect("config");
    println!("starting restate-server (admin :{admin}, ingress :{ingress})");
    let _server = KillOnDrop(
        Command::new(server_binary())
            .arg("--config-file")
            .arg(dir.0.join("config.toml"))
            .arg("--base-dir")
            .arg(dir.0.join("data"))
            .args(["--listen-mode", "tcp", "--no-logo"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start restate-server"),
    );
    let http = reqwest::Client::new();
    for _ in 0..600 {
        if http
            .get(format!("http://127.0.0.1:{admin}/health"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let real = std::env::var_os("ANTHROPIC_API_KEY").is_some();
    let mock = MockServer::start().await;
    mock.push(ScriptedResponse::tool_call(
        "c1",
        "step",
        json!({"label": "a"}),
    ));
    mock.push(ScriptedResponse::text("Step a is done."));
    let model = (!real).then(|| mock.anthropic_base_url());
    // The step waits while this file exists, so that the worker dies while it runs.
    std::fs::write(tools.join("hold-a"), b"").expect("hold file");

    let addr = format!("127.0.0.1:{worker_port}");
    let mut worker = spawn_worker(&addr, model.as_deref(), &tools);
    wait_for("the worker", || std::net::TcpStream::connect(&addr).is_ok()).await;
    let registered = http
        .post(format!("http://127.0.0.1:{admin}/deployments"))
        .json(&json!({ "uri": format!("http://{addr}") }))
        .send()
        .await
        .expect("admin API");
    println!("registered the worker: {}", registered.status());

    let run = http
        .post(format!("http://127.0.0.1:{ingress}/AgentSession/demo/run"))
        .json(&json!("Do step a with the step tool, then say it is done."))
        .send();
    let run = tokio::spawn(run);
    let log = tools.join("tools.log");
    let started = |n: usize| {
        let log = log.clone();
        move || {
            std::fs::read_to_string(&log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.starts_with("start a"))
                .count()
                >= n
        }
    };
    wait_for("the tool to start", started(1)).await;
    println!(
        "the tool is running: SIGKILL the worker (pid {})",
        worker.id()
    );
    worker.kill();
    worker = spawn_worker(&addr, model.as_deref(), &tools);
    println!(
        "restarted the worker (pid {}); Restate replays the journal",
        worker.id()
    );
    wait_for("the tool to start again", started(2)).await;
    let _ = std::fs::remove_file(tools.join("hold-a"));

    let report: serde_json::Value = run
        .await
        .expect("run task")
        .expect("ingress")
        .json()
        .await
        .expect("report");
    println!("run finished: {report}");
    println!(
        "model calls: {} (the one before the crash was not made again)",
        mock.requests().len()
    );
    println!(
        "tool log:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    // The worker, the server and the temp dir go when their guards drop, here or at a panic.
}
