//! A three-node Restate cluster on loopback: three `restate-server` processes, each with its
//! own ports and data directory, forming one cluster with a replicated log (bifrost
//! `replicated`, replication 2) and a replicated (Raft) metadata store on all three nodes.
//! And the client side a host needs against it: send with an idempotency key, then attach,
//! retrying over the ingresses of several nodes.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{free_port, server_or_skip, wait_until, TempDir, RETRY_POLICY};

/// How many nodes, and the log's (and partitions') replication factor.
pub const NODES: usize = 3;
pub const REPLICATION: usize = 2;
/// Partitions of the cluster: more than the nodes, so every node leads some.
pub const PARTITIONS: usize = 4;
const CLUSTER_NAME: &str = "agent-loop-test";

/// Bound on a client's retries: only reached when the cluster does not recover.
const CLIENT_PATIENCE: Duration = Duration::from_secs(90);

/// One `restate-server` process of the cluster.
pub struct Node {
    pub name: String,
    child: Option<Child>,
    /// The node-to-node (fabric) port; it also serves `/health` and `/metrics`.
    pub fabric: u16,
    pub admin: String,
    pub ingress: String,
}

impl Node {
    fn fabric_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.fabric)
    }

    pub fn alive(&self) -> bool {
        self.child.is_some()
    }

    /// SIGKILL: no shutdown, exactly a crash of the machine's process.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill().expect("SIGKILL the node");
            let _ = child.wait();
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The configuration of node `index` (0-based): what differs between nodes is the name,
/// the addresses and `auto-provision` (the first node only); the data dir is `--base-dir`.
pub fn node_config(index: usize, fabric: u16, admin: u16, ingress: u16, peers: &[u16]) -> String {
    let metadata = peers
        .iter()
        .map(|p| format!("\"http://127.0.0.1:{p}/\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        r#"cluster-name = "{CLUSTER_NAME}"
node-name = "n{n}"
roles = ["metadata-server", "admin", "worker", "log-server", "http-ingress"]
auto-provision = {provision}
default-num-partitions = {PARTITIONS}
default-replication = {REPLICATION}
bind-address = "127.0.0.1:{fabric}"
advertised-address = "http://127.0.0.1:{fabric}/"
disable-telemetry = true
log-disable-ansi-codes = true
rocksdb-total-memory-size = "256 MiB"

[metadata-client]
type = "replicated"
addresses = [{metadata}]

[bifrost]
default-provider = "replicated"

{RETRY_POLICY}

[admin]
bind-address = "127.0.0.1:{admin}"
advertised-address = "http://127.0.0.1:{admin}/"
disable-web-ui = true

[ingress]
bind-address = "127.0.0.1:{ingress}"
advertised-address = "http://127.0.0.1:{ingress}/"
"#,
        n = index + 1,
        provision = index == 0,
    )
}

/// The cluster, or `None` (with a loud note) when restate-server is not installed outside
/// CI. Under `CI` a missing server fails the test.
pub fn cluster_or_skip(test: &str) -> Option<Cluster> {
    server_or_skip(test, "the cluster test").map(|binary| Cluster::start(&binary))
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    pub http: reqwest::Client,
    pub dir: TempDir,
}

impl Cluster {
    fn start(binary: &Path) -> Cluster {
        let dir = TempDir::new("cluster");
        let ports: Vec<(u16, u16, u16)> = (0..NODES)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let fabrics: Vec<u16> = ports.iter().map(|p| p.0).collect();
        let nodes = ports
            .iter()
            .enumerate()
            .map(|(i, &(fabric, admin, ingress))| {
                let home = dir.0.join(format!("n{}", i + 1));
                std::fs::create_dir_all(&home).expect("node dir");
                let config = home.join("config.toml");
                std::fs::write(&config, node_config(i, fabric, admin, ingress, &fabrics))
                    .expect("write config");
                let log = std::fs::File::create(home.join("server.log")).expect("server log");
                let child = Command::new(binary)
                    .arg("--config-file")
                    .arg(&config)
                    .arg("--base-dir")
                    .arg(home.join("data"))
                    .args(["--listen-mode", "tcp", "--no-logo"])
                    .stdin(Stdio::null())
                    .stdout(log.try_clone().expect("log"))
                    .stderr(log)
                    .spawn()
                    .expect("start restate-server");
                Node {
                    name: format!("n{}", i + 1),
                    child: Some(child),
                    fabric,
                    admin: format!("http://127.0.0.1:{admin}"),
                    ingress: format!("http://127.0.0.1:{ingress}"),
                }
            })
            .collect();
        Cluster {
            nodes,
            http: reqwest::Client::new(),
            dir,
        }
    }

    async fn get_json(&self, url: String) -> Option<Value> {
        let response = self.http.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        response.json().await.ok()
    }

    /// A node's own view of itself (`/health` on its fabric port).
    pub async fn node_health(&self, node: usize) -> Option<Value> {
        self.get_json(format!("{}/health", self.nodes[node].fabric_url()))
            .await
    }

    /// A node's Prometheus metrics, summed over labels: `name` → value.
    pub async fn metrics(&self, node: usize) -> std::collections::BTreeMap<String, f64> {
        let text = match self
            .http
            .get(format!("{}/metrics", self.nodes[node].fabric_url()))
            .send()
            .await
        {
            Ok(response) => response.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        };
        let mut sums = std::collections::BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some((series, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let name = series.split('{').next().unwrap_or(series);
            // Only the success series of counters that have a status label.
            if series.contains("status=") && !series.contains("status=\"ok\"") {
                continue;
            }
            if let Ok(value) = value.parse::<f64>() {
                *sums.entry(name.to_owned()).or_insert(0.0) += value;
            }
        }
        sums
    }

    /// Partition leaders per live node (a dead node: 0).
    pub async fn leaders(&self) -> Vec<usize> {
        let mut leaders = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            let n = if node.alive() {
                self.metrics(i)
                    .await
                    .get("restate_num_active_partition_leaders")
                    .copied()
                    .unwrap_or(0.0) as usize
            } else {
                0
            };
            leaders.push(n);
        }
        leaders
    }

    /// Waits until the cluster serves: every live node alive with all its roles ready and a
    /// member of the metadata cluster, every partition with a leader, every live ingress up.
    pub async fn ready(&self) {
        wait_until("every node is alive and ready", || async {
            for (i, node) in self.nodes.iter().enumerate() {
                if !node.alive() {
                    continue;
                }
                let Some(health) = self.node_health(i).await else {
                    return false;
                };
                let ready = health["status"] == "Alive"
                    && ["admin_status", "worker_status", "log_server_status"]
                        .iter()
                        .all(|k| health[*k] == "Ready")
                    && health["metadata_server_status"] == "Member";
                let ingress = self
                    .http
                    .get(format!("{}/restate/health", node.ingress))
                    .send()
                    .await;
                if !ready || !matches!(ingress, Ok(r) if r.status().is_success()) {
                    return false;
                }
            }
            true
        })
        .await;
        wait_until("the metadata cluster has every node", || async {
            let admin = &self.nodes[0].admin;
            self.get_json(format!("{admin}/cluster-health"))
                .await
                .and_then(|h| h["metadata_cluster_health"]["members"].as_array().cloned())
                .is_some_and(|members| members.len() == NODES)
        })
        .await;
        wait_until("every partition has a leader", || async {
            self.leaders().await.iter().sum::<usize>() == PARTITIONS
        })
        .await;
    }

    /// Waits until every live node knows the schema `node` has (after a registration there).
    pub async fn schema_propagated(&self, node: usize) {
        let version = self.node_health(node).await.expect("health")["schema_version"]
            .as_u64()
            .expect("schema_version");
        wait_until("every node knows the new deployment", || async {
            for (i, n) in self.nodes.iter().enumerate() {
                if !n.alive() {
                    continue;
                }
                let known = self
                    .node_health(i)
                    .await
                    .and_then(|h| h["schema_version"].as_u64());
                if known.is_none_or(|v| v < version) {
                    return false;
                }
            }
            true
        })
        .await;
    }

    /// Registers a deployment through one node's admin API.
    pub async fn register_uri(&self, node: usize, uri: &str) -> reqwest::Response {
        self.http
            .post(format!("{}/deployments", self.nodes[node].admin))
            .json(&json!({ "uri": uri }))
            .send()
            .await
            .expect("admin API")
    }

    /// Log records stored by each node's log-server and committed by each node's sequencers,
    /// from the nodes' metrics: with a replicated log, every committed record is stored on
    /// `REPLICATION` log-servers.
    pub async fn log_figures(&self) -> (Vec<f64>, f64) {
        let mut stored = Vec::new();
        let mut committed = 0.0;
        for i in 0..self.nodes.len() {
            let metrics = self.metrics(i).await;
            stored.push(
                metrics
                    .get("restate_log_server_store_records_total")
                    .copied()
                    .unwrap_or(0.0),
            );
            committed += metrics
                .get("restate_bifrost_sequencer_committed_records_total")
                .copied()
                .unwrap_or(0.0);
        }
        (stored, committed)
    }
}

/// How a host runs a handler durably against a cluster whose nodes may die: `POST
/// .../send` with an `idempotency-key` (sending again is harmless: the same invocation is
/// answered), then attach to the invocation for its result. Either step is retried on a
/// connection error, a `5xx` or a timeout, moving to the next ingress; re-attaching is
/// harmless too. Counts the retries in `retries`.
pub struct DurableClient {
    pub http: reqwest::Client,
    /// The ingresses to use, the preferred one first.
    pub ingresses: Vec<String>,
    pub retries: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl DurableClient {
    /// Runs `handler` of the object `service/key` with `body` (JSON, or none); its JSON
    /// output.
    pub async fn invoke(
        &self,
        service: &str,
        key: &str,
        handler: &str,
        body: Option<&Value>,
        idempotency_key: &str,
    ) -> Value {
        let start = Instant::now();
        let mut turn = 0;
        // Send: the invocation is accepted (or was already) once this answers.
        let invocation_id = loop {
            let ingress = &self.ingresses[turn % self.ingresses.len()];
            let mut request = self
                .http
                .post(format!("{ingress}/{service}/{key}/{handler}/send"))
                .header("idempotency-key", idempotency_key)
                .timeout(Duration::from_secs(10));
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await;
            match self.settle(response, "send").await {
                Some(answer) => {
                    break answer["invocationId"]
                        .as_str()
                        .expect("an invocation id")
                        .to_owned()
                }
                None => self.retry(&mut turn, start, "send").await,
            }
        };
        // Attach: waits for the result; a broken or timed-out wait attaches again.
        loop {
            let ingress = &self.ingresses[turn % self.ingresses.len()];
            let response = self
                .http
                .get(format!(
                    "{ingress}/restate/invocation/{invocation_id}/attach"
                ))
                .timeout(Duration::from_secs(20))
                .send()
                .await;
            match self.settle(response, "attach").await {
                Some(answer) => return answer,
                None => self.retry(&mut turn, start, "attach").await,
            }
        }
    }

    /// The JSON answer, or `None` for what is worth retrying; anything else fails the test.
    async fn settle(
        &self,
        response: reqwest::Result<reqwest::Response>,
        what: &str,
    ) -> Option<Value> {
        let response = response.ok()?;
        let status = response.status();
        let text = response.text().await.ok()?;
        if status.is_server_error() {
            return None;
        }
        assert!(status.is_success(), "{what}: {status} {text}");
        Some(serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    async fn retry(&self, turn: &mut usize, start: Instant, what: &str) {
        assert!(
            start.elapsed() < CLIENT_PATIENCE,
            "{what}: the cluster did not answer within {CLIENT_PATIENCE:?}"
        );
        self.retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        *turn += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
