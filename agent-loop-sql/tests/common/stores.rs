//! What the session tests share: unique names, temporary SQLite files, and the PostgreSQL
//! server under test.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The variable naming the PostgreSQL server the tests use.
pub const POSTGRES_URL: &str = "AGENT_LOOP_POSTGRES_URL";

/// A name no other test of this run, or of another run, uses.
pub fn unique(name: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{name}_{}_{}_{nanos}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Whether this runs under CI (`CI` set, and not to `false` or `0`).
pub fn under_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// The PostgreSQL server's URL (`AGENT_LOOP_POSTGRES_URL`, which `.ci/run` sets after
/// starting one with `scripts/postgres-test-server`). The PostgreSQL tests are `#[ignore]`d
/// (a plain `cargo test` lists them so, with the reason); one asked to run without the
/// variable fails, saying how to start a server.
pub fn postgres_url() -> String {
    match std::env::var(POSTGRES_URL) {
        Ok(url) if !url.trim().is_empty() => url,
        _ => panic!(
            "{POSTGRES_URL} is not set: start a server with `scripts/postgres-test-server start \
             DIR` (it needs Debian's postgresql package) and export the URL it prints as \
             {POSTGRES_URL}"
        ),
    }
}

/// A temporary SQLite file, removed (with its WAL files) when dropped.
pub struct TempFile(pub PathBuf);

impl TempFile {
    /// A new file name in the temp dir, for `case`.
    pub fn new(case: &str) -> TempFile {
        TempFile(std::env::temp_dir().join(format!("agent-loop-{}.db", unique(case))))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", self.0.display()));
        }
    }
}
