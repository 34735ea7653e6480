//! The real components of a durability test: a `restate-server` from the npm package
//! (`npm ci --prefix agent-loop-restate`), worker processes of this crate's
//! `agent-loop-restate-worker` binary, and a loopback mock model in the test process.
#![allow(dead_code)]

pub mod cluster;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Generous bound on waiting for a component: only reached when something is broken.
const PATIENCE: Duration = Duration::from_secs(60);

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// A fresh directory under the system's temp dir, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "agent-loop-restate-{name}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Restate's retry policy in the tests' servers: quick retries of a worker that is gone
/// (production keeps the defaults).
pub const RETRY_POLICY: &str = r#"[default-retry-policy]
initial-interval = "20ms"
exponentiation-factor = 2.0
max-attempts = 10000
on-max-attempts = "kill"
max-interval = "200ms"
"#;

/// The restate-server binary `npm ci --prefix agent-loop-restate` installed.
fn server_binary() -> Option<PathBuf> {
    let scope = Path::new(env!("CARGO_MANIFEST_DIR")).join("node_modules/@restatedev");
    let entries = std::fs::read_dir(&scope).ok()?;
    entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("restate-server-")
        })
        .map(|e| e.path().join("bin/restate-server"))
        .find(|p| p.is_file())
}

/// The server, or `None` (with a loud note) when it is not installed outside CI. Under `CI`
/// a missing server fails the test.
pub fn restate_or_skip(test: &str) -> Option<Restate> {
    server_or_skip(test, "the durability tests").map(|binary| Restate::start(&binary))
}

/// The restate-server binary, or `None` (with a loud note naming `what` is skipped) when it is
/// not installed outside CI. Under `CI` a missing server fails the test.
pub fn server_or_skip(test: &str, what: &str) -> Option<PathBuf> {
    match server_binary() {
        Some(binary) => Some(binary),
        None if std::env::var_os("CI").is_some() => panic!(
            "restate-server is not installed: run `npm ci --prefix agent-loop-restate` (CI must \
             not skip {test})"
        ),
        None => {
            say_skipped(&format!(
                "*** SKIPPED {test}: restate-server is not installed; run \
                 `npm ci --prefix agent-loop-restate` to run {what} ***"
            ));
            None
        }
    }
}

/// Says on the terminal itself that a test is skipped: libtest captures `eprintln!` of a test
/// that passes, so a skip said that way shows nowhere. Under CI the test fails instead.
pub fn say_skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "\n{line}\n");
}

pub struct Restate {
    child: Child,
    pub dir: TempDir,
    pub ingress: String,
    pub admin: String,
    pub http: reqwest::Client,
}

impl Restate {
    fn start(binary: &Path) -> Restate {
        let dir = TempDir::new("server");
        let (node, admin, ingress) = (free_port(), free_port(), free_port());
        let config = format!(
            r#"default-num-partitions = 2
disable-telemetry = true
disable-prometheus = true
rocksdb-total-memory-size = "256 MiB"
bind-address = "127.0.0.1:{node}"
advertised-address = "http://127.0.0.1:{node}/"
{RETRY_POLICY}[admin]
bind-address = "127.0.0.1:{admin}"
disable-web-ui = true
[ingress]
bind-address = "127.0.0.1:{ingress}"
"#
        );
        let config_path = dir.0.join("config.toml");
        std::fs::write(&config_path, config).expect("write config");
        let log = std::fs::File::create(dir.0.join("server.log")).expect("server log");
        let child = Command::new(binary)
            .arg("--config-file")
            .arg(&config_path)
            .arg("--base-dir")
            .arg(dir.0.join("data"))
            .args(["--listen-mode", "tcp", "--no-logo", "--node-name", "test"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start restate-server");
        Restate {
            child,
            dir,
            ingress: format!("http://127.0.0.1:{ingress}"),
            admin: format!("http://127.0.0.1:{admin}"),
            http: reqwest::Client::new(),
        }
    }

    /// Waits until the admin API and the ingress answer.
    pub async fn ready(&self) {
        let start = Instant::now();
        loop {
            let admin = self.http.get(format!("{}/health", self.admin)).send().await;
            let ingress = self
                .http
                .get(format!("{}/restate/health", self.ingress))
                .send()
                .await;
            if matches!(&admin, Ok(r) if r.status().is_success()) && ingress.is_ok() {
                return;
            }
            assert!(start.elapsed() < PATIENCE, "restate-server did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Registers a worker with the admin API.
    pub async fn register(&self, worker: &Worker) -> reqwest::Response {
        self.http
            .post(format!("{}/deployments", self.admin))
            .json(&json!({ "uri": worker.url() }))
            .send()
            .await
            .expect("admin API")
    }

    /// Runs `input` in session `session`: the ingress holds the request until the run ends.
    pub fn run(&self, session: &str, input: &str) -> tokio::task::JoinHandle<Value> {
        let request = self
            .http
            .post(format!("{}/AgentSession/{session}/run", self.ingress))
            .json(&json!(input));
        tokio::spawn(async move {
            let response = request.send().await.expect("ingress");
            let status = response.status();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert!(status.is_success(), "run failed: {status} {body}");
            body
        })
    }

    /// Like [`run`](Self::run), but gives the status and body whatever they are.
    pub fn run_raw(&self, session: &str, input: &str) -> tokio::task::JoinHandle<(u16, Value)> {
        let request = self
            .http
            .post(format!("{}/AgentSession/{session}/run", self.ingress))
            .json(&json!(input));
        tokio::spawn(async move {
            let response = request.send().await.expect("ingress");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            (
                status,
                serde_json::from_str(&text).unwrap_or(Value::String(text)),
            )
        })
    }

    /// Cancels an invocation through the admin API (what `restate invocations cancel` does).
    pub async fn cancel(&self, invocation_id: &str) {
        let response = self
            .http
            .patch(format!("{}/invocations/{invocation_id}/cancel", self.admin))
            .send()
            .await
            .expect("admin API");
        assert!(response.status().is_success(), "cancel: {response:?}");
    }

    /// Calls a handler of the session object.
    pub async fn call(&self, session: &str, handler: &str, body: Option<Value>) -> (u16, Value) {
        let mut request = self
            .http
            .post(format!("{}/AgentSession/{session}/{handler}", self.ingress));
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request.send().await.expect("ingress");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap_or_default();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// Rows of the admin SQL API.
    pub async fn query(&self, sql: &str) -> Vec<Value> {
        let response: Value = self
            .http
            .post(format!("{}/query", self.admin))
            .header("accept", "application/json")
            .json(&json!({ "query": sql }))
            .send()
            .await
            .expect("admin API")
            .json()
            .await
            .expect("query rows");
        response["rows"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until the tool invocation of this call has completed (its result is journaled).
    pub async fn wait_tool_completed(&self, session: &str, call_id: &str) {
        let sql = format!(
            "SELECT status FROM sys_invocation WHERE target = 'AgentTools/execute' AND \
             idempotency_key LIKE '{session}/%/{call_id}'"
        );
        wait_until("the tool's invocation completes", || async {
            self.query(&sql)
                .await
                .iter()
                .any(|row| row["status"] == "completed")
        })
        .await;
    }
}

impl Drop for Restate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A worker process: the crate's `agent-loop-restate-worker` binary.
pub struct Worker {
    child: Option<Child>,
    pub port: u16,
    model_url: String,
    tool_dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Worker {
    pub async fn start(model_url: &str, tool_dir: &Path) -> Worker {
        Worker::start_with(model_url, tool_dir, &[]).await
    }

    /// A worker with extra environment (`MAX_STATE_BYTES`, say).
    pub async fn start_with(model_url: &str, tool_dir: &Path, env: &[(&str, &str)]) -> Worker {
        let mut worker = Worker {
            child: None,
            port: free_port(),
            model_url: model_url.to_owned(),
            tool_dir: tool_dir.to_owned(),
            env: env
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        };
        worker.spawn().await;
        worker
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn spawn(&mut self) {
        let child = Command::new(env!("CARGO_BIN_EXE_agent-loop-restate-worker"))
            .env("WORKER_ADDR", format!("127.0.0.1:{}", self.port))
            .env("MODEL_BASE_URL", &self.model_url)
            .env("TOOL_DIR", &self.tool_dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the worker");
        self.child = Some(child);
        let port = self.port;
        wait_until("the worker listens", || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        })
        .await;
    }

    /// SIGKILL: no shutdown, no flushing, exactly a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the worker");
            let _ = child.wait();
        }
    }

    /// Starts the process again on the same address (the registered deployment).
    pub async fn restart(&mut self) {
        self.kill();
        self.spawn().await;
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Polls `check` until it holds; fails the test after a generous bound.
pub async fn wait_until<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < PATIENCE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The tools' log: `start LABEL KEY` / `done LABEL KEY` lines.
pub fn tool_log(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("tools.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn count(log: &[String], line: &str) -> usize {
    log.iter().filter(|l| *l == line).count()
}

/// Waits until the tools' log in `dir` holds `line` exactly `times` times; a timeout shows
/// the log.
pub async fn wait_for_log(dir: &Path, line: &str, times: usize) {
    let start = Instant::now();
    loop {
        let log = tool_log(dir);
        if count(&log, line) == times {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "timed out waiting for {times} × {line:?} in the tools' log: {log:#?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Makes the tool call labelled `label` wait (until [`release`]).
pub fn hold(dir: &Path, label: &str) {
    std::fs::write(dir.join(format!("hold-{label}")), b"").expect("hold file");
}

pub fn release(dir: &Path, label: &str) {
    let _ = std::fs::remove_file(dir.join(format!("hold-{label}")));
}

/// A round-robin TCP load balancer in front of worker replicas, as a deployment would put
/// one: Restate knows one address; each connection goes to the next live worker.
pub struct Balancer {
    pub port: u16,
    /// Connections each backend took.
    pub connections: std::sync::Arc<Vec<std::sync::atomic::AtomicUsize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    pub async fn start(backends: Vec<u16>) -> Balancer {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the balancer");
        let port = listener.local_addr().expect("address").port();
        let connections: Arc<Vec<AtomicUsize>> =
            Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
        let counts = connections.clone();
        let task = tokio::spawn(async move {
            let next = Arc::new(AtomicUsize::new(0));
            while let Ok((mut inbound, _)) = listener.accept().await {
                let first = next.fetch_add(1, Ordering::Relaxed);
                let backends = backends.clone();
                let counts = counts.clone();
                tokio::spawn(async move {
                    for k in 0..backends.len() {
                        let i = (first + k) % backends.len();
                        let Ok(mut outbound) =
                            tokio::net::TcpStream::connect(("127.0.0.1", backends[i])).await
                        else {
                            continue;
                        };
                        counts[i].fetch_add(1, Ordering::Relaxed);
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        return;
                    }
                });
            }
        });
        Balancer {
            port,
            connections,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Restate {
    /// Registers a deployment by address.
    pub async fn register_uri(&self, uri: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/deployments", self.admin))
            .json(&json!({ "uri": uri }))
            .send()
            .await
            .expect("admin API")
    }
}
