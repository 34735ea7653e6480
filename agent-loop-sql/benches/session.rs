//! Session stores: the cost of saving one turn (one `append` of a `Messages` entry holding a
//! user message and an answer, about 300 bytes each) into a session that already holds 10,
//! 100 and 1,000 turns, on SQLite and PostgreSQL. The stores only append, so that cost must
//! not grow with the session. `load` at the same sizes, for information (it reads every
//! entry since the last `Conversation` one, so it grows).
//!
//! Each timed append is undone, untimed, through a connection of the bench's own (the entry
//! deleted, the version set back), so every iteration saves into a session of exactly the
//! stated size. The database holds 1,000 other sessions of 10 turns beside the measured
//! ones. Before each measurement the undos' leftovers are cleared (PostgreSQL:
//! `VACUUM`; SQLite: a WAL checkpoint), so no size pays for the one measured before it.
//!
//! Run: `cargo bench -p agent-loop-sql --features postgres --bench session`. PostgreSQL is measured when
//! `AGENT_LOOP_POSTGRES_URL` names a server (`scripts/postgres-test-server start DIR` starts
//! one); without it, SQLite only, and the bench says so.

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_loop::context::Conversation;
use agent_loop::session::{SessionEntry, SessionStore};
use agent_loop::Message;
use agent_loop_sql::{PostgresStore, SqliteStore};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tokio::runtime::Runtime;

const SIZES: [u64; 3] = [10, 100, 1_000];
/// Sessions of 10 turns in the database beside the measured ones.
const OTHER_SESSIONS: usize = 1_000;

/// Turn `t`: a user message and an answer of a few hundred bytes each.
fn turn(t: u64) -> Vec<Message> {
    vec![
        Message::user(format!(
            "Step {t}: open config/retry.toml, check whether the backoff is exponential and \
             whether jitter is on, and tell me what the longest wait between two attempts can \
             be with the current settings. If anything looks wrong, say which line and why; \
             do not change the file yet."
        )),
        Message::assistant(format!(
            "Turn {t}: the backoff is exponential: it starts at 200 ms and doubles on every \
             attempt (multiplier 2.0), with full jitter, for at most 5 attempts. The longest \
             single wait is therefore 3.2 s before the fifth attempt. Nothing looks wrong, but \
             max_attempts = 5 with a 200 ms base gives up after about 6 s in total."
        )),
    ]
}

/// The entry that saves turn `t` into a session of `t` turns.
fn save(t: u64) -> SessionEntry {
    SessionEntry::Messages {
        start: 2 * t,
        messages: turn(t),
    }
}

/// A session of `turns` turns: its conversation entry, then one entry per turn.
fn session_entries(turns: u64) -> Vec<SessionEntry> {
    let mut entries = vec![SessionEntry::Conversation {
        conversation: Conversation::new(Some("You are a careful coding agent.".into()), vec![]),
    }];
    entries.extend((0..turns).map(save));
    entries
}

/// A store, and how to take back the last entry behind its back.
struct Backend {
    name: &'static str,
    store: Arc<dyn SessionStore>,
    undo: Undo,
}

enum Undo {
    Sqlite(rusqlite::Connection, PathBuf),
    Postgres(tokio_postgres::Client, String),
}

impl Undo {
    /// Removes entry `version` of `session` and sets the session back to `version - 1`.
    fn run(&self, rt: &Runtime, session: &str, version: i64) {
        // One transaction (one commit, one WAL flush), with the bench's own ids and numbers.
        let sql = format!(
            "BEGIN;
             DELETE FROM agent_loop_entries WHERE session_id = '{session}' AND version = {version};
             UPDATE agent_loop_sessions SET version = {} WHERE id = '{session}';
             COMMIT;",
            version - 1
        );
        match self {
            Undo::Sqlite(conn, _) => conn.execute_batch(&sql).expect("undo"),
            Undo::Postgres(client, _) => rt.block_on(client.batch_execute(&sql)).expect("undo"),
        }
    }

    /// Clears what the undos left behind before the next measurement, so that it does not
    /// pay for the previous one's: dead rows (PostgreSQL), a long WAL (SQLite).
    fn settle(&self, rt: &Runtime) {
        match self {
            Undo::Sqlite(conn, _) => {
                conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
                    .expect("checkpoint");
            }
            Undo::Postgres(client, _) => rt.block_on(async {
                client
                    .batch_execute("VACUUM ANALYZE agent_loop_sessions, agent_loop_entries")
                    .await
                    .expect("vacuum");
            }),
        }
    }

    fn cleanup(self, rt: &Runtime) {
        match self {
            Undo::Sqlite(conn, path) => {
                drop(conn);
                for suffix in ["", "-wal", "-shm"] {
                    let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
                }
            }
            Undo::Postgres(client, schema) => rt.block_on(async {
                let _ = client
                    .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                    .await;
            }),
        }
    }
}

fn sqlite(rt: &Runtime) -> Backend {
    let path = std::env::temp_dir().join(format!("agent-loop-bench-{}.db", std::process::id()));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    let store = rt.block_on(SqliteStore::open(&path)).expect("open");
    let conn = rusqlite::Connection::open(&path).expect("open");
    conn.busy_timeout(Duration::from_secs(30)).expect("timeout");
    Backend {
        name: "sqlite",
        store: Arc::new(store),
        undo: Undo::Sqlite(conn, path),
    }
}

fn postgres(rt: &Runtime) -> Option<Backend> {
    let Ok(url) = std::env::var("AGENT_LOOP_POSTGRES_URL") else {
        eprintln!(
            "session bench: AGENT_LOOP_POSTGRES_URL is not set, so SQLite only. To measure \
             PostgreSQL too: export AGENT_LOOP_POSTGRES_URL=\"$(scripts/postgres-test-server \
             start /tmp/agent-loop-pg)\""
        );
        return None;
    };
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .expect("connect");
        tokio::spawn(connection);
        let schema = format!("agent_loop_bench_{}", std::process::id());
        client
            .batch_execute(&format!(
                "CREATE SCHEMA \"{schema}\"; SET search_path = \"{schema}\""
            ))
            .await
            .expect("schema");
        let separator = if url.contains('?') { '&' } else { '?' };
        let url = format!("{url}{separator}options=-c%20search_path%3D{schema}");
        let store = PostgresStore::connect(&url).await.expect("connect");
        Some(Backend {
            name: "postgres",
            store: Arc::new(store),
            undo: Undo::Postgres(client, schema),
        })
    })
}

fn session(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let mut backends = vec![sqlite(&rt)];
    backends.extend(postgres(&rt));

    for backend in &backends {
        // Other sessions beside the measured ones, as a store in use holds: the planner
        // treats a table of three rows differently from one of thousands.
        let other = session_entries(10);
        for i in 0..OTHER_SESSIONS {
            rt.block_on(backend.store.append(&format!("other-{i}"), 0, &other))
                .expect("setup");
        }
        for turns in SIZES {
            let id = format!("bench-{turns}");
            let version = rt
                .block_on(backend.store.append(&id, 0, &session_entries(turns)))
                .expect("setup");
            assert_eq!(version, turns + 1);
        }
    }

    let mut group = c.benchmark_group("session/append_turn");
    group.sample_size(30);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for backend in &backends {
        for turns in SIZES {
            let id = format!("bench-{turns}");
            let entry = [save(turns)];
            backend.undo.settle(&rt);
            group.bench_with_input(BenchmarkId::new(backend.name, turns), &turns, |b, _| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        let start = Instant::now();
                        let version = rt
                            .block_on(backend.store.append(&id, turns + 1, &entry))
                            .expect("append");
                        total += start.elapsed();
                        backend.undo.run(&rt, &id, version as i64);
                    }
                    total
                })
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("session/load");
    group.sample_size(30);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for backend in &backends {
        for turns in SIZES {
            let id = format!("bench-{turns}");
            backend.undo.settle(&rt);
            group.bench_with_input(BenchmarkId::new(backend.name, turns), &turns, |b, _| {
                b.iter(|| {
                    let loaded = rt.block_on(backend.store.load(&id)).expect("load");
                    black_box(loaded)
                })
            });
        }
    }
    group.finish();

    for backend in &backends {
        interleaved(&rt, backend);
    }

    for backend in backends {
        drop(backend.store);
        backend.undo.cleanup(&rt);
    }
}

/// The same appends, the sizes taking turns (10, 100, 1,000, 10, …) rather than one after
/// the other, so that the machine's drift (other builds, the disk's flushes) falls on every
/// size alike: the ratios between sizes come from here. Printed to stdout.
fn interleaved(rt: &Runtime, backend: &Backend) {
    const ROUNDS: usize = 1_500;
    backend.undo.settle(rt);
    let entries: Vec<[SessionEntry; 1]> = SIZES.iter().map(|&t| [save(t)]).collect();
    let mut times: Vec<Vec<Duration>> = vec![Vec::with_capacity(ROUNDS); SIZES.len()];
    for _ in 0..ROUNDS {
        for (i, &turns) in SIZES.iter().enumerate() {
            let id = format!("bench-{turns}");
            let start = Instant::now();
            let version = rt
                .block_on(backend.store.append(&id, turns + 1, &entries[i]))
                .expect("append");
            times[i].push(start.elapsed());
            backend.undo.run(rt, &id, version as i64);
        }
    }
    let stats: Vec<(f64, f64)> = times
        .iter_mut()
        .map(|t| {
            t.sort();
            let mean = t.iter().sum::<Duration>().as_secs_f64() / t.len() as f64;
            (t[t.len() / 2].as_secs_f64() * 1e6, mean * 1e6)
        })
        .collect();
    for (i, turns) in SIZES.iter().enumerate() {
        let (median, mean) = stats[i];
        println!(
            "session/append_turn interleaved {}/{turns}: median {median:.1} µs ({:.3} of 10 \
             turns), mean {mean:.1} µs ({:.3}), {ROUNDS} appends",
            backend.name,
            median / stats[0].0,
            mean / stats[0].1,
        );
    }
}

criterion_group!(benches, session);
criterion_main!(benches);
