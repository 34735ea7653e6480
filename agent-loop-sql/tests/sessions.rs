//! The session stores against one suite: every case is written once, as an async fn over a
//! [`Backend`], and run against `MemoryStore` (the reference semantics), `SqliteStore` (a new
//! temp file per test) and `PostgresStore` (a new schema per test, on the server
//! `AGENT_LOOP_POSTGRES_URL` names).
//!
//! Run: `cargo test -p agent-loop-sql --features postgres --test sessions`. The PostgreSQL
//! cases are `#[ignore]`d (listed so, with the reason); `--include-ignored` runs them, and
//! without `AGENT_LOOP_POSTGRES_URL` they fail. A throwaway server:
//!
//! ```sh
//! export AGENT_LOOP_POSTGRES_URL="$(scripts/postgres-test-server start /tmp/agent-loop-pg)"
//! cargo test -p agent-loop-sql --features postgres --test sessions -- --include-ignored
//! scripts/postgres-test-server stop /tmp/agent-loop-pg
//! ```
//!
//! The two-process case re-runs this binary twice (the ignored test `child_writer`, told
//! what to do by environment variables), so both children write one session through their
//! own connections at the same time.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agent_loop::context::Conversation;
use agent_loop::error::SessionError;
use agent_loop::session::{
    self, MemoryStore, SessionEntry, SessionStore, StoredSession, ENTRY_FORMAT,
};
use agent_loop::testing::{ScriptedClient, ScriptedResponse};
use agent_loop::{ContentBlock, Message, Role};
use agent_loop_sql::{PostgresStore, SqliteStore};
use serde_json::json;

mod common;
use common::stores::{postgres_url, unique, TempFile};

/// For a child process: the store to open (`sqlite:PATH` or `postgres:URL`).
const CHILD_STORE: &str = "AGENT_LOOP_TEST_CHILD_STORE";
/// For a child process: the session, its name as a writer, how many writes, and the
/// directory of the start barrier.
const CHILD_SESSION: &str = "AGENT_LOOP_TEST_CHILD_SESSION";
const CHILD_WRITER: &str = "AGENT_LOOP_TEST_CHILD_WRITER";
const CHILD_WRITES: &str = "AGENT_LOOP_TEST_CHILD_WRITES";
const CHILD_BARRIER: &str = "AGENT_LOOP_TEST_CHILD_BARRIER";

// ---------------------------------------------------------------------------------------
// Backends

/// A database for one test, and ways to reach it: stores (each a new connection), the raw
/// SQL the corruption cases need, and the address a child process opens.
enum Backend {
    Memory(Arc<MemoryStore>),
    Sqlite(TempFile),
    /// The URL with the test's own schema on its search path, and the schema's name.
    Postgres {
        url: String,
        base: String,
        schema: String,
    },
}

/// A database file that goes when the test ends (with SQLite's WAL files).
/// `url` with `params` added to its query string.
fn with_params(url: &str, params: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{params}")
}

/// `text` as an SQL string literal (SQLite and PostgreSQL alike: no backslash escapes).
fn quote(text: &str) -> String {
    assert!(!text.contains('\0'), "no NUL in SQL text");
    format!("'{}'", text.replace('\'', "''"))
}

/// A raw connection, its connection task spawned.
async fn pg_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connecting to {url}: {e}"));
    tokio::spawn(connection);
    client
}

async fn memory(_case: &str) -> Option<Backend> {
    Some(Backend::Memory(Arc::new(MemoryStore::new())))
}

async fn sqlite(case: &str) -> Option<Backend> {
    Some(Backend::Sqlite(TempFile::new(case)))
}

async fn postgres(case: &str) -> Option<Backend> {
    let base = postgres_url();
    // A schema of its own: tests run in parallel on one server, and some write rows (or the
    // schema version) behind the store's back.
    let schema = unique(&format!("agent_loop_test_{case}")).to_lowercase();
    let schema: String = schema.chars().take(63).collect();
    pg_client(&base)
        .await
        .batch_execute(&format!("CREATE SCHEMA \"{schema}\""))
        .await
        .unwrap_or_else(|e| panic!("creating schema {schema}: {e}"));
    let url = with_params(&base, &format!("options=-c%20search_path%3D{schema}"));
    Some(Backend::Postgres { url, base, schema })
}

impl Backend {
    /// A store on the test's database: a new connection each time (the memory store is the
    /// same one).
    async fn open(&self) -> Result<Arc<dyn SessionStore>, SessionError> {
        Ok(match self {
            Backend::Memory(store) => store.clone(),
            Backend::Sqlite(file) => Arc::new(SqliteStore::open(&file.0).await?),
            Backend::Postgres { url, .. } => Arc::new(PostgresStore::connect(url).await?),
        })
    }

    async fn store(&self) -> Arc<dyn SessionStore> {
        self.open().await.expect("the store opens")
    }

    /// What a child process opens: the same database.
    fn locator(&self) -> String {
        match self {
            Backend::Memory(_) => unreachable!("a memory store is one process's"),
            Backend::Sqlite(file) => format!("sqlite:{}", file.0.display()),
            Backend::Postgres { url, .. } => format!("postgres:{url}"),
        }
    }

    /// Runs SQL behind the store's back, on a connection of its own.
    async fn execute(&self, sql: &str) {
        match self {
            Backend::Memory(_) => unreachable!("a memory store has no SQL"),
            Backend::Sqlite(file) => {
                let conn = rusqlite::Connection::open(&file.0).unwrap();
                conn.busy_timeout(Duration::from_secs(30)).unwrap();
                conn.execute_batch(sql)
                    .unwrap_or_else(|e| panic!("{sql}: {e}"));
            }
            Backend::Postgres { url, .. } => pg_client(url)
                .await
                .batch_execute(sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e:?}")),
        }
    }

    /// Writes entry `version` of `session` as given, and makes it the session's version.
    async fn write_row(&self, session: &str, version: i64, kind: &str, format: i64, body: &str) {
        let (session, kind, body) = (quote(session), quote(kind), quote(body));
        self.execute(&format!(
            "INSERT INTO agent_loop_entries (session_id, version, kind, format, body)
             VALUES ({session}, {version}, {kind}, {format}, {body});
             UPDATE agent_loop_sessions SET version = {version} WHERE id = {session};"
        ))
        .await;
    }

    /// Drops what the test left on the server (files go on their own).
    async fn cleanup(&self) {
        if let Backend::Postgres { base, schema, .. } = self {
            let _ = pg_client(base)
                .await
                .batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE"))
                .await;
        }
    }
}

/// One test per case and backend: `memory::round_trip`, `sqlite::round_trip`, …
macro_rules! cases {
    ($backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    if let Some(backend) = super::$backend(stringify!($case)).await {
                        super::$case(&backend).await;
                        backend.cleanup().await;
                    }
                }
            )*
        }
    };
    // Cases whose backend is not always there: ignored unless asked for, with the reason.
    (#[ignore = $why:literal] $backend:ident: $($case:ident),* $(,)?) => {
        mod $backend {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                #[ignore = $why]
                async fn $case() {
                    if let Some(backend) = super::$backend(stringify!($case)).await {
                        super::$case(&backend).await;
                        backend.cleanup().await;
                    }
                }
            )*
        }
    };
}

cases!(memory: round_trip, loads_from_the_newest_conversation, stale_writes_conflict,
    racing_tasks_one_wins, delete, one_run_at_a_time, an_overtaken_run_says_what_it_saved,
    an_expired_lease_frees_the_session, fork_and_rewind);
cases!(sqlite: round_trip, loads_from_the_newest_conversation, stale_writes_conflict,
    racing_tasks_one_wins, delete, two_processes_lose_nothing, corrupt_rows, newer_schema,
    opened_at_once, one_run_at_a_time, an_overtaken_run_says_what_it_saved,
    an_expired_lease_frees_the_session, fork_and_rewind);
cases!(
    #[ignore = "needs PostgreSQL: set AGENT_LOOP_POSTGRES_URL (scripts/postgres-test-server start DIR)"]
    postgres: round_trip, loads_from_the_newest_conversation, stale_writes_conflict,
    racing_tasks_one_wins, delete, two_processes_lose_nothing, corrupt_rows, newer_schema,
    opened_at_once, broken_connection, one_run_at_a_time, an_overtaken_run_says_what_it_saved,
    an_expired_lease_frees_the_session, fork_and_rewind);

// ---------------------------------------------------------------------------------------
// Entries

fn conversation(system: &str, texts: &[&str]) -> SessionEntry {
    SessionEntry::Conversation {
        conversation: Conversation::new(
            Some(system.to_owned()),
            texts.iter().map(|t| Message::user(*t)).collect(),
        ),
    }
}

fn messages(start: u64, texts: &[&str]) -> SessionEntry {
    SessionEntry::Messages {
        start,
        messages: texts.iter().map(|t| Message::user(*t)).collect(),
    }
}

fn texts(conversation: &Conversation) -> Vec<String> {
    conversation.messages.iter().map(Message::text).collect()
}

/// Text no single-byte encoding holds: accents, CJK, emoji (with a joiner), right-to-left,
/// combining marks, a NUL (which PostgreSQL's TEXT refuses raw: it must stay escaped in the
/// JSON), quotes and backslashes.
const UNICODE: &str =
    "Grüße, 你好, こんにちは, 👩‍💻🚀, مرحبا, e\u{301}, nul:\u{0}, \"q\" \\ \n\t end";

/// Every kind of entry, and the messages of every role and block the agent writes.
fn every_kind() -> Vec<SessionEntry> {
    let tool_turn = vec![
        Message {
            role: Role::Assistant,
            content: vec![
                ContentBlock::Thinking {
                    thinking: "Read the file first.".into(),
                    signature: "EqQBCkYIBxgCKkB3".into(),
                },
                ContentBlock::RedactedThinking {
                    data: "b64+/=".into(),
                },
                ContentBlock::text(UNICODE),
                ContentBlock::ToolUse {
                    id: "toolu_01".into(),
                    name: "read_file".into(),
                    input: json!({"path": "src/ünï.rs", "lines": [1, 2, 3], "deep": {"ok": true, "n": null}}),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![ContentBlock::tool_result("toolu_01", "fn main() {}", true)],
        },
    ];
    // A large message: 2 MiB of text, multi-byte characters included.
    let large = "0123456789abcdef€ü🚀\n".repeat(2 * 1024 * 1024 / 27);
    vec![
        conversation(UNICODE, &["Hi", UNICODE]),
        SessionEntry::Messages {
            start: 2,
            messages: tool_turn,
        },
        SessionEntry::Paused {
            pause: "pause-1 ✓".into(),
            state: json!({"turn": 3, "waiting": ["toolu_01"], "ключ": UNICODE, "f": 1.5}),
        },
        SessionEntry::Resumed {
            pause: "pause-1 ✓".into(),
        },
        SessionEntry::Messages {
            start: 4,
            messages: vec![Message::user(large), Message::assistant("Done.")],
        },
    ]
}

// ---------------------------------------------------------------------------------------
// The cases

/// Every kind of entry comes back as it went in, in one append or one at a time; and the
/// replay builds the conversation they describe.
async fn round_trip(backend: &Backend) {
    let store = backend.store().await;
    let entries = every_kind();

    // All in one append.
    let id = "round-trip: séance 🧵";
    assert_eq!(store.load(id).await.unwrap(), None);
    assert_eq!(store.append(id, 0, &entries).await.unwrap(), 5);
    let expected = StoredSession {
        version: 5,
        entries: (1..).zip(entries.clone()).collect(),
    };
    assert!(store.load(id).await.unwrap() == Some(expected.clone()));
    // Another connection reads the same.
    let other = backend.store().await;
    assert!(other.load(id).await.unwrap() == Some(expected.clone()));

    // One at a time.
    let one_by_one = "round-trip, one at a time";
    for (version, entry) in (0..).zip(&entries) {
        let appended = store
            .append(one_by_one, version, std::slice::from_ref(entry))
            .await
            .unwrap();
        assert_eq!(appended, version + 1);
    }
    assert!(other.load(one_by_one).await.unwrap() == Some(expected));

    // The replay.
    let session = session::load(&*other, id).await.unwrap().expect("stored");
    assert_eq!(session.id, id);
    assert_eq!(session.version, 5);
    assert_eq!(session.conversation.system.as_deref(), Some(UNICODE));
    assert_eq!(session.conversation.messages.len(), 6);
    assert_eq!(session.conversation.messages[1].text(), UNICODE);
    assert_eq!(
        session.conversation.messages[2].tool_uses().count(),
        1,
        "the tool call"
    );
    assert_eq!(session.conversation.messages[4].text().len(), {
        let SessionEntry::Messages { messages, .. } = &entries[4] else {
            unreachable!()
        };
        messages[0].text().len()
    });
    assert_eq!(session.pause, None, "resumed");

    // A session with no entries yet, as the memory store keeps it.
    assert_eq!(store.append("empty", 0, &[]).await.unwrap(), 0);
    assert_eq!(
        store.load("empty").await.unwrap(),
        Some(StoredSession {
            version: 0,
            entries: vec![]
        })
    );
    assert_eq!(
        store
            .append("empty", 0, &[conversation("s", &[])])
            .await
            .unwrap(),
        1
    );
}

/// Loading starts at the newest `Conversation` entry; a pause not resumed is the session's.
async fn loads_from_the_newest_conversation(backend: &Backend) {
    let store = backend.store().await;
    let id = "newest";
    let first = conversation("one", &["a"]);
    store.append(id, 0, &[first]).await.unwrap();
    store.append(id, 1, &[messages(1, &["b"])]).await.unwrap();
    store
        .append(id, 2, &[messages(1, &["c", "d"])])
        .await
        .unwrap();
    let replaced = conversation("two", &["x"]);
    let after = messages(1, &["y"]);
    let paused = SessionEntry::Paused {
        pause: "p".into(),
        state: json!({"calls": ["t1"]}),
    };
    assert_eq!(
        store
            .append(id, 3, &[replaced.clone(), after.clone(), paused.clone()])
            .await
            .unwrap(),
        6
    );
    let loaded = store.load(id).await.unwrap().unwrap();
    assert_eq!(loaded.version, 6);
    assert_eq!(
        loaded.entries,
        vec![(4, replaced), (5, after), (6, paused)],
        "from the newest conversation on"
    );

    let session = session::load(&*store, id).await.unwrap().unwrap();
    assert_eq!(session.conversation.system.as_deref(), Some("two"));
    assert_eq!(texts(&session.conversation), ["x", "y"]);
    assert_eq!(
        session.pause,
        Some(("p".to_owned(), json!({"calls": ["t1"]})))
    );

    // Before the replacement, the replay applied the rewrite of message 1.
    let before = "newest, not replaced";
    store
        .append(
            before,
            0,
            &[
                conversation("one", &["a"]),
                messages(1, &["b"]),
                messages(1, &["c", "d"]),
            ],
        )
        .await
        .unwrap();
    let session = session::load(&*store, before).await.unwrap().unwrap();
    assert_eq!(texts(&session.conversation), ["a", "c", "d"]);
    assert_eq!(session::load(&*store, "nobody").await.unwrap(), None);
}

/// A writer that builds on a version that is not the session's is refused, told the version
/// found, and writes nothing.
async fn stale_writes_conflict(backend: &Backend) {
    let store = backend.store().await;
    let id = "stale";
    store
        .append(id, 0, &[conversation("s", &[]), messages(0, &["a"])])
        .await
        .unwrap();
    store.append(id, 2, &[messages(1, &["b"])]).await.unwrap();
    let before = store.load(id).await.unwrap();

    for expected in [0, 1, 2, 4, 1000, u64::MAX] {
        let err = store
            .append(
                id,
                expected,
                &[messages(0, &["lost"]), messages(0, &["lost"])],
            )
            .await
            .unwrap_err();
        assert_eq!(
            err,
            SessionError::Conflict {
                session: id.into(),
                expected,
                found: Some(3)
            }
        );
        assert!(err.is_conflict());
    }
    assert_eq!(store.load(id).await.unwrap(), before, "nothing written");

    // A session that does not exist: found None, and it still does not.
    let err = store
        .append("missing", 3, &[conversation("s", &[])])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        SessionError::Conflict {
            session: "missing".into(),
            expected: 3,
            found: None
        }
    );
    assert_eq!(store.load("missing").await.unwrap(), None);

    // The right version goes through.
    assert_eq!(
        store.append(id, 3, &[messages(2, &["c"])]).await.unwrap(),
        4
    );
}

/// Two tasks (on two connections) append at the same version at the same moment: exactly
/// one wins, the other is told the winner's version, and the log holds the winners only.
async fn racing_tasks_one_wins(backend: &Backend) {
    let id = "race";
    let a = backend.store().await;
    let b = backend.store().await;
    a.append(id, 0, &[conversation("s", &[])]).await.unwrap();
    let mut winners = Vec::new();
    for round in 0..20u64 {
        let version = round + 1;
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let race = |store: Arc<dyn SessionStore>, name: &'static str| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let text = format!("{name}{round}");
                let result = store
                    .append(id, version, &[messages(round, &[text.as_str()])])
                    .await;
                (text, result)
            })
        };
        let (ra, rb) = tokio::join!(race(a.clone(), "a"), race(b.clone(), "b"));
        let results = [ra.unwrap(), rb.unwrap()];
        let won: Vec<_> = results.iter().filter(|(_, r)| r.is_ok()).collect();
        assert_eq!(won.len(), 1, "round {round}: {results:?}");
        assert_eq!(won[0].1, Ok(version + 1));
        winners.push(won[0].0.clone());
        let lost = results.iter().find(|(_, r)| r.is_err()).unwrap();
        assert_eq!(
            lost.1,
            Err(SessionError::Conflict {
                session: id.into(),
                expected: version,
                found: Some(version + 1)
            }),
            "round {round}"
        );
    }
    let session = session::load(&*b, id).await.unwrap().unwrap();
    assert_eq!(session.version, 21);
    assert_eq!(texts(&session.conversation), winners);
}

/// Two processes append to one session in a loop, loading it again after each conflict:
/// afterwards every write is in the log exactly once, in each writer's order.
async fn two_processes_lose_nothing(backend: &Backend) {
    const WRITES: usize = 40;
    let id = "two processes";
    let store = backend.store().await;
    store
        .append(id, 0, &[conversation("s", &[])])
        .await
        .unwrap();

    let barrier = std::env::temp_dir().join(format!("agent-loop-{}", unique("barrier")));
    std::fs::create_dir_all(&barrier).unwrap();
    let exe = std::env::current_exe().unwrap();
    let children: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|writer| {
            tokio::process::Command::new(&exe)
                .args([
                    "--exact",
                    "child_writer",
                    "--nocapture",
                    "--include-ignored",
                ])
                .env(CHILD_STORE, backend.locator())
                .env(CHILD_SESSION, id)
                .env(CHILD_WRITER, writer)
                .env(CHILD_WRITES, WRITES.to_string())
                .env(CHILD_BARRIER, &barrier)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .kill_on_drop(true)
                .spawn()
                .unwrap()
        })
        .collect();
    // Start both at once, once both are connected.
    wait_for(&barrier.join("a.ready")).await;
    wait_for(&barrier.join("b.ready")).await;
    std::fs::write(barrier.join("go"), b"").unwrap();
    let mut conflicts = 0;
    for child in children {
        let out = child.wait_with_output().await.unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "a child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let line = stdout
            .lines()
            // Anywhere in a line: with one test thread, libtest prints the test's name on
            // the line its output starts.
            .find_map(|l| l.split_once("child writer result: ").map(|(_, rest)| rest))
            .unwrap_or_else(|| panic!("no result line: {stdout}"));
        conflicts += line
            .split_whitespace()
            .nth(2)
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap();
    }
    let _ = std::fs::remove_dir_all(&barrier);
    eprintln!(
        "two processes: {} writes, {conflicts} conflicts retried",
        2 * WRITES
    );

    let session = session::load(&*store, id).await.unwrap().unwrap();
    assert_eq!(
        session.version,
        1 + 2 * WRITES as u64,
        "one entry per write"
    );
    let written = texts(&session.conversation);
    assert_eq!(written.len(), 2 * WRITES);
    for writer in ["a", "b"] {
        let mine: Vec<&String> = written
            .iter()
            .filter(|t| t.starts_with(&format!("{writer}-")))
            .collect();
        let expected: Vec<String> = (0..WRITES).map(|i| format!("{writer}-{i}")).collect();
        assert_eq!(mine, expected.iter().collect::<Vec<_>>(), "writer {writer}");
    }
}

async fn wait_for(path: &Path) {
    for _ in 0..1200 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{} did not appear within a minute", path.display());
}

/// The child of `two_processes_lose_nothing` (ignored: it runs only when that test starts
/// it, with its environment).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of two_processes_lose_nothing"]
async fn child_writer() {
    let Ok(locator) = std::env::var(CHILD_STORE) else {
        eprintln!("child_writer: not started by two_processes_lose_nothing; nothing to do");
        return;
    };
    let id = std::env::var(CHILD_SESSION).unwrap();
    let writer = std::env::var(CHILD_WRITER).unwrap();
    let writes: usize = std::env::var(CHILD_WRITES).unwrap().parse().unwrap();
    let barrier = PathBuf::from(std::env::var(CHILD_BARRIER).unwrap());
    let store: Box<dyn SessionStore> = if let Some(path) = locator.strip_prefix("sqlite:") {
        Box::new(SqliteStore::open(path).await.unwrap())
    } else if let Some(url) = locator.strip_prefix("postgres:") {
        Box::new(PostgresStore::connect(url).await.unwrap())
    } else {
        panic!("unknown store {locator}");
    };
    std::fs::write(barrier.join(format!("{writer}.ready")), b"").unwrap();
    wait_for(&barrier.join("go")).await;

    let mut conflicts = 0;
    for i in 0..writes {
        let text = format!("{writer}-{i}");
        loop {
            let session = session::load(&*store, &id).await.unwrap().unwrap();
            let entry = messages(session.conversation.messages.len() as u64, &[text.as_str()]);
            match store.append(&id, session.version, &[entry]).await {
                Ok(_) => break,
                Err(e) if e.is_conflict() => conflicts += 1,
                Err(e) => panic!("writer {writer}, write {i}: {e}"),
            }
        }
    }
    println!("child writer result: {writes} writes {conflicts} conflicts");
}

/// Rows written behind the store's back that cannot be read are `Corrupt`, naming the
/// session and the entry; other sessions still load.
async fn corrupt_rows(backend: &Backend) {
    let store = backend.store().await;
    let good = messages(1, &["fine"]).encode();
    let format = i64::from(ENTRY_FORMAT);
    let newer = format!("format {}", format + 1);
    let cases: [(&str, &str, i64, &str, &str); 4] = [
        (
            "not json",
            "messages",
            format,
            "{\"type\": \"messages\", ",
            "not a session entry",
        ),
        (
            "unknown type",
            "teleport",
            format,
            r#"{"type":"teleport","to":"mars"}"#,
            "not a session entry",
        ),
        ("newer format", "messages", format + 1, &good.body, &newer),
        ("no format", "messages", 0, &good.body, "format 0"),
    ];
    for (id, kind, format, body, says) in cases {
        store
            .append(id, 0, &[conversation("s", &["a", "b"])])
            .await
            .unwrap();
        backend.write_row(id, 2, kind, format, body).await;
        let err = store.load(id).await.unwrap_err();
        assert!(
            matches!(&err, SessionError::Corrupt { session, version: 2, .. } if session == id),
            "{id}: {err:?}"
        );
        assert!(err.to_string().contains("entry 2"), "{id}: {err}");
        assert!(err.to_string().contains(says), "{id}: {err}");
        // The store's own write after it still refuses to build on a version it did not see
        // and is not stopped by the bad row.
        assert_eq!(
            store
                .append(id, 1, &[messages(2, &["x"])])
                .await
                .unwrap_err(),
            SessionError::Conflict {
                session: id.into(),
                expected: 1,
                found: Some(2)
            }
        );
    }

    // Messages replaced from past the end: each row reads, the replay refuses them.
    let id = "past the end";
    store
        .append(id, 0, &[conversation("s", &["a"])])
        .await
        .unwrap();
    backend
        .write_row(
            id,
            2,
            "messages",
            format,
            &messages(5, &["far"]).encode().body,
        )
        .await;
    assert!(store.load(id).await.unwrap().is_some());
    let err = session::load(&*store, id).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Corrupt { version: 2, .. }),
        "{err:?}"
    );
    assert!(err.to_string().contains("past the end"), "{err}");

    // An entry missing from the log (the session's version counts it).
    let id = "gap";
    store
        .append(id, 0, &[conversation("s", &["a"])])
        .await
        .unwrap();
    backend
        .write_row(id, 3, "messages", format, &good.body)
        .await;
    let err = store.load(id).await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Corrupt { version: 2, .. }),
        "{err:?}"
    );

    // The first case's session again, and a healthy one beside them.
    assert!(store.load("not json").await.is_err());
    store
        .append("healthy", 0, &[conversation("s", &["a"])])
        .await
        .unwrap();
    assert_eq!(store.load("healthy").await.unwrap().unwrap().version, 1);
}

/// A database whose schema is newer than this build knows is refused when opened, and left
/// as it is.
async fn newer_schema(backend: &Backend) {
    let store = backend.store().await;
    store
        .append("kept", 0, &[conversation("s", &[])])
        .await
        .unwrap();
    drop(store);
    backend
        .execute(match backend {
            Backend::Postgres { .. } => "INSERT INTO agent_loop_schema (version) VALUES (99)",
            _ => "INSERT INTO agent_loop_schema (version, applied_at) VALUES (99, 'later')",
        })
        .await;
    let err = backend.open().await.unwrap_err();
    assert!(
        matches!(err, SessionError::Schema { found: 99, supported } if supported < 99),
        "{err:?}"
    );
    assert!(err.to_string().contains("upgrade agent-loop"), "{err}");
    // Refused again: opening changed nothing.
    assert!(matches!(
        backend.open().await.unwrap_err(),
        SessionError::Schema { found: 99, .. }
    ));
}

/// A new database opened by several stores at once: the migrations run once, and all of
/// them work.
async fn opened_at_once(backend: &Backend) {
    let opened = futures::future::join_all((0..4).map(|_| backend.open())).await;
    let stores: Vec<_> = opened
        .into_iter()
        .map(|s| s.expect("every store opens"))
        .collect();
    stores[0]
        .append("shared", 0, &[conversation("s", &[])])
        .await
        .unwrap();
    for store in &stores {
        assert_eq!(store.load("shared").await.unwrap().unwrap().version, 1);
    }
}

/// Deleting a session removes it and its entries (a new one of the same id starts at 1);
/// deleting one that does not exist is no error; other sessions stay.
async fn delete(backend: &Backend) {
    let store = backend.store().await;
    let entries = [conversation("s", &["a"]), messages(1, &["b"])];
    store.append("gone", 0, &entries).await.unwrap();
    store.append("stays", 0, &entries).await.unwrap();
    store.delete("gone").await.unwrap();
    assert_eq!(store.load("gone").await.unwrap(), None);
    assert_eq!(
        store
            .append("gone", 2, &[messages(2, &["c"])])
            .await
            .unwrap_err(),
        SessionError::Conflict {
            session: "gone".into(),
            expected: 2,
            found: None
        }
    );
    store.delete("gone").await.unwrap();
    store.delete("never was").await.unwrap();

    let fresh = conversation("new", &[]);
    assert_eq!(
        store
            .append("gone", 0, std::slice::from_ref(&fresh))
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        store.load("gone").await.unwrap(),
        Some(StoredSession {
            version: 1,
            entries: vec![(1, fresh)]
        }),
        "nothing of the deleted session is left"
    );
    assert_eq!(store.load("stays").await.unwrap().unwrap().version, 2);
}

/// A store whose connection the server closed fails with `Database`, never a panic, on
/// every call.
async fn broken_connection(backend: &Backend) {
    let Backend::Postgres { url, base, .. } = backend else {
        unreachable!("a PostgreSQL case")
    };
    let name = unique("broken");
    let url = with_params(url, &format!("application_name={name}"));
    let store = PostgresStore::connect(&url).await.unwrap();
    store
        .append("s", 0, &[conversation("s", &[])])
        .await
        .unwrap();
    let killed: i64 = pg_client(base)
        .await
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
             WHERE application_name = $1",
            &[&name],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1);
    // The server closes it a moment after it is told to: every call fails once it has.
    let mut err = None;
    for _ in 0..200 {
        match store.load("s").await {
            Ok(_) => tokio::time::sleep(Duration::from_millis(25)).await,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    let err = err.expect("the connection was closed");
    assert!(matches!(err, SessionError::Database(_)), "{err:?}");
    for result in [
        store.append("s", 1, &[messages(0, &["a"])]).await.map(drop),
        store.load("s").await.map(drop),
        store.delete("s").await,
    ] {
        assert!(
            matches!(result, Err(SessionError::Database(_))),
            "{result:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Agents writing one session: a run holds it from its start to its end

/// Where a run is held while a second writer tries the session.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Point {
    /// The first model call made, nothing of its answer yet: the input is not saved.
    BeforeAnswer,
    /// The first answer half streamed.
    MidStream,
    /// The first turn's tool running.
    MidTool,
    /// The first turn saved; the second model call made, nothing of its answer yet.
    NextTurn,
}

const POINTS: [Point; 4] = [
    Point::BeforeAnswer,
    Point::MidStream,
    Point::MidTool,
    Point::NextTurn,
];

/// A gate a run stops at: `reached` is signalled when it gets there, and it goes on once
/// `open` gives it a permit.
#[derive(Clone)]
struct Gate {
    reached: Arc<tokio::sync::Notify>,
    open: Arc<tokio::sync::Semaphore>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            reached: Arc::default(),
            open: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

impl Gate {
    async fn pass(&self) {
        self.reached.notify_one();
        self.open.acquire().await.expect("open").forget();
    }
}

/// A scripted model held at `point` (the model-call points) until the gate opens.
struct GatedModel {
    inner: ScriptedClient,
    point: Point,
    gate: Gate,
    calls: std::sync::atomic::AtomicUsize,
}

impl agent_loop::LlmClient for GatedModel {
    fn stream<'a>(
        &'a self,
        request: &'a agent_loop::provider::ModelRequest,
    ) -> agent_loop::provider::LlmStream<'a> {
        use futures::StreamExt;
        let call = self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let hold_after = match (self.point, call) {
            (Point::BeforeAnswer, 0) | (Point::NextTurn, 1) => Some(0),
            (Point::MidStream, 0) => Some(2),
            _ => None,
        };
        let inner = self.inner.stream(request);
        let Some(after) = hold_after else {
            return inner;
        };
        let gate = self.gate.clone();
        Box::pin(futures::stream::unfold(
            (inner, 0usize, gate),
            move |(mut inner, seen, gate)| async move {
                if seen == after {
                    gate.pass().await;
                }
                let item = inner.next().await?;
                Some((item, (inner, seen + 1, gate)))
            },
        ))
    }

    fn model(&self) -> &str {
        self.inner.model()
    }
}

/// The first writer's model: a tool call, then its answer.
fn first_writer_script() -> Vec<ScriptedResponse> {
    vec![
        ScriptedResponse::text("Looking it up.").then_tool_call("c1", "lookup", json!({})),
        ScriptedResponse::text("A's answer."),
    ]
}

/// An agent on `store`'s session `id` with the tool `lookup`, held at `point` by `gate`;
/// and its script, to add to.
fn gated_agent(
    store: Arc<dyn SessionStore>,
    id: &str,
    point: Point,
    gate: &Gate,
) -> (agent_loop::Agent, ScriptedClient) {
    let script = ScriptedClient::new(first_writer_script());
    let tool_gate = (point == Point::MidTool).then(|| gate.clone());
    let lookup = agent_loop::tool::FnTool::new(
        "lookup",
        "Looks something up.",
        move |_: serde_json::Value, _ctx| {
            let gate = tool_gate.clone();
            async move {
                if let Some(gate) = gate {
                    gate.pass().await;
                }
                Ok::<_, agent_loop::ToolError>("found")
            }
        },
    );
    let model = GatedModel {
        inner: script.clone(),
        point,
        gate: gate.clone(),
        calls: Default::default(),
    };
    let agent = agent_loop::Agent::builder(model)
        .tool(lookup)
        .session(store, id)
        .build()
        .expect("an agent");
    (agent, script)
}

/// A plain agent on the session, answering `answer`; and its model, to count requests.
fn plain_agent(
    store: Arc<dyn SessionStore>,
    id: &str,
    answer: &str,
) -> (agent_loop::Agent, ScriptedClient) {
    let client = ScriptedClient::new([ScriptedResponse::text(answer)]);
    let agent = agent_loop::Agent::builder(client.clone())
        .session(store, id)
        .build()
        .expect("an agent");
    (agent, client)
}

async fn outcome(
    stream: impl futures::Stream<Item = agent_loop::AgentEvent>,
) -> agent_loop::RunOutcome {
    use futures::StreamExt;
    let events: Vec<_> = stream.collect().await;
    match events.last() {
        Some(agent_loop::AgentEvent::Finished(outcome)) => outcome.clone(),
        other => panic!("no Finished: {other:?}"),
    }
}

fn session_error(outcome: &agent_loop::RunOutcome) -> Option<&SessionError> {
    match &outcome.termination {
        agent_loop::Termination::Error(agent_loop::Error::Session(e)) => Some(e),
        _ => None,
    }
}

/// How many user messages of the stored session say `text`.
fn said(conversation: &Conversation, text: &str) -> usize {
    conversation
        .messages
        .iter()
        .flat_map(|m| m.content.iter())
        .filter(|b| matches!(b, ContentBlock::Text { text: t, .. } if t.contains(text)))
        .count()
}

/// A session with one finished exchange in it.
async fn seeded(backend: &Backend, id: &str) -> Arc<dyn SessionStore> {
    let store = backend.store().await;
    let (mut seed, _) = plain_agent(store.clone(), id, "Hello.");
    let done = outcome(seed.run("Hi")).await;
    assert_eq!(done.termination, agent_loop::Termination::Completed);
    store
}

/// At every point of a turn, a second agent's run on the session is refused before it asks
/// its model or writes anything; the first run's turns are saved whole; once it ends, the
/// second goes on from it, and nothing is stored half, merged or twice.
async fn one_run_at_a_time(backend: &Backend) {
    for point in POINTS {
        let id = unique(&format!("{point:?}"));
        let store = seeded(backend, &id).await;
        let gate = Gate::default();
        let (mut first, _) = gated_agent(store.clone(), &id, point, &gate);
        let running = tokio::spawn(outcome(first.run("A's question")));
        gate.reached.notified().await;

        let before = session::load(&*store, &id).await.unwrap().unwrap();
        assert!(
            before.lease.is_some(),
            "{point:?}: the run holds the session"
        );
        let saved = if point == Point::NextTurn { 5 } else { 2 };
        assert_eq!(
            before.conversation.messages.len(),
            saved,
            "{point:?}: only whole turns are stored"
        );

        let (mut second, second_model) = plain_agent(backend.store().await, &id, "B's answer.");
        let refused = outcome(second.run("B's question")).await;
        assert!(
            matches!(session_error(&refused), Some(SessionError::Busy { .. })),
            "{point:?}: {}",
            refused.termination
        );
        assert!(
            refused
                .termination
                .to_string()
                .contains("nothing was sent or written"),
            "{}",
            refused.termination
        );
        assert!(
            second_model.requests().is_empty(),
            "{point:?}: no model call"
        );
        let unchanged = session::load(&*store, &id).await.unwrap().unwrap();
        assert_eq!(
            unchanged.version, before.version,
            "{point:?}: nothing written"
        );

        gate.open.add_permits(1);
        let done = running.await.unwrap();
        assert_eq!(
            done.termination,
            agent_loop::Termination::Completed,
            "{point:?}"
        );
        let after_first = session::load(&*store, &id).await.unwrap().unwrap();
        assert_eq!(
            after_first.lease, None,
            "{point:?}: released at the run's end"
        );
        assert_eq!(
            after_first.conversation.messages,
            first.messages().to_vec(),
            "{point:?}: the whole run is stored"
        );
        assert_eq!(said(&after_first.conversation, "B's question"), 0);

        let again = outcome(second.run("B's question")).await;
        assert_eq!(
            again.termination,
            agent_loop::Termination::Completed,
            "{point:?}"
        );
        let last = session::load(&*store, &id).await.unwrap().unwrap();
        assert_eq!(last.conversation.messages.len(), 8, "{point:?}");
        assert_eq!(said(&last.conversation, "A's question"), 1, "{point:?}");
        assert_eq!(said(&last.conversation, "B's question"), 1, "{point:?}");
        assert_eq!(last.conversation.messages[6].text(), "B's question");
        agent_loop::ContextManager::new(agent_loop::context::ContextConfig::default())
            .restore(last.conversation.clone())
            .unwrap_or_else(|e| panic!("{point:?}: {e}"));
    }
}

/// When another writer gets in anyway (here a host ends the run's lease, as one that ran
/// out would), compare-and-swap decides: the overtaken run stops at its next save, says
/// which of its turns were saved, keeps the other writer's turn intact, and a run again
/// reads the session afresh and stores nothing twice.
async fn an_overtaken_run_says_what_it_saved(backend: &Backend) {
    for (point, saved_turns) in [(Point::MidTool, 0), (Point::NextTurn, 1)] {
        let id = unique(&format!("overtaken_{point:?}"));
        let store = seeded(backend, &id).await;
        let gate = Gate::default();
        let (mut first, model) = gated_agent(store.clone(), &id, point, &gate);
        let running = tokio::spawn(outcome(first.run("A's question")));
        gate.reached.notified().await;

        let ended = session::release_lease(&*store, &id).await.unwrap();
        assert!(ended.is_some(), "{point:?}");
        let (mut second, _) = plain_agent(backend.store().await, &id, "B's answer.");
        let went = outcome(second.run("B's question")).await;
        assert_eq!(went.termination, agent_loop::Termination::Completed);
        let theirs = session::load(&*store, &id).await.unwrap().unwrap();

        gate.open.add_permits(1);
        let lost = running.await.unwrap();
        match session_error(&lost) {
            Some(SessionError::RunOvertaken {
                saved_turns: n,
                found,
                ..
            }) => {
                assert_eq!(*n, saved_turns, "{point:?}");
                assert_eq!(*found, theirs.version, "{point:?}");
            }
            other => panic!("{point:?}: {other:?} ({})", lost.termination),
        }
        let message = lost.termination.to_string();
        let expected = if saved_turns == 0 {
            "nothing of this run was saved"
        } else {
            "the run's first turn was saved, the turn in flight was not"
        };
        assert!(message.contains(expected), "{message}");
        if point == Point::NextTurn {
            // What the lost turn said is still the host's.
            assert_eq!(lost.final_text, "A's answer.");
        }
        let kept = session::load(&*store, &id).await.unwrap().unwrap();
        assert_eq!(
            kept.version, theirs.version,
            "{point:?}: nothing more written"
        );
        assert_eq!(kept.conversation, theirs.conversation);

        // The same agent runs again: it reads the session afresh and builds on it as it
        // stands, so no message is stored twice.
        model.push(ScriptedResponse::text("A again."));
        let retried = outcome(first.run("A's question, again")).await;
        assert_eq!(retried.termination, agent_loop::Termination::Completed);
        let last = session::load(&*store, &id).await.unwrap().unwrap();
        assert_eq!(said(&last.conversation, "B's question"), 1, "{point:?}");
        assert_eq!(said(&last.conversation, "A's question, again"), 1);
        assert_eq!(
            said(&last.conversation, "A's question"),
            saved_turns as usize + 1
        );
        agent_loop::ContextManager::new(agent_loop::context::ContextConfig::default())
            .restore(last.conversation.clone())
            .unwrap_or_else(|e| panic!("{point:?}: {e}"));
    }
}

/// A lease that ran out (its holder died without ending it) holds nothing; one that has
/// not is honoured whoever wrote it; a release of another holder's lease changes nothing.
async fn an_expired_lease_frees_the_session(backend: &Backend) {
    let id = unique("expired");
    let store = seeded(backend, &id).await;
    let at = session::load(&*store, &id).await.unwrap().unwrap().version;
    let dead = SessionEntry::Lease {
        holder: "a process that died".into(),
        until_ms: session::now_ms() - 1,
    };
    store.append(&id, at, &[dead]).await.unwrap();
    let loaded = session::load(&*store, &id).await.unwrap().unwrap();
    assert_eq!(
        loaded.lease.as_ref().map(|l| l.holder.as_str()),
        Some("a process that died")
    );
    let (mut agent, _) = plain_agent(store.clone(), &id, "Back.");
    let done = outcome(agent.run("Anyone?")).await;
    assert_eq!(done.termination, agent_loop::Termination::Completed);

    let at = session::load(&*store, &id).await.unwrap().unwrap().version;
    let live = SessionEntry::Lease {
        holder: "a live process".into(),
        until_ms: session::now_ms() + 3_600_000,
    };
    let other = SessionEntry::Released {
        holder: "someone else".into(),
    };
    store.append(&id, at, &[live, other]).await.unwrap();
    let (mut agent, model) = plain_agent(store.clone(), &id, "Too soon.");
    let refused = outcome(agent.run("Anyone?")).await;
    match session_error(&refused) {
        Some(SessionError::Busy { holder, .. }) => assert_eq!(holder, "a live process"),
        other => panic!("{other:?}"),
    }
    assert!(model.requests().is_empty());
}

/// Fork and rewind, through an agent with a session: a fork is a copy that shares nothing
/// (read through another connection), a cut between a call and its result is refused with
/// nothing written, a rewind is an entry of the log (what came before stays readable there),
/// and a run after it builds on the rewound conversation.
async fn fork_and_rewind(backend: &Backend) {
    let store = backend.store().await;
    let id = unique("fork-and-rewind");
    let add = agent_loop::tool::FnTool::new(
        "add",
        "Adds.",
        |input: serde_json::Value, _ctx| async move {
            let sum = input["a"].as_i64().unwrap_or(0) + input["b"].as_i64().unwrap_or(0);
            Ok::<_, agent_loop::ToolError>(sum.to_string())
        },
    );
    let client = ScriptedClient::new([
        ScriptedResponse::tool_call("c1", "add", json!({"a": 1, "b": 2})),
        ScriptedResponse::text("3"),
        ScriptedResponse::text("more said"),
        ScriptedResponse::text("after the rewind"),
    ]);
    let mut agent = agent_loop::Agent::builder(client)
        .system("Be exact.")
        .tool(add)
        .session(store.clone(), &id)
        .build()
        .expect("an agent");
    let done = outcome(agent.run("add 1 and 2")).await;
    assert_eq!(done.termination, agent_loop::Termination::Completed);
    assert_eq!(agent.messages().len(), 4);

    // After the call, before its result: refused, nothing written.
    let fork = unique("fork");
    let err = agent.fork_session(&fork, 2).await.unwrap_err();
    assert!(
        matches!(
            &err,
            agent_loop::Error::Session(SessionError::InvalidPoint { at: 2, .. })
        ),
        "{err}"
    );
    assert!(store.load(&fork).await.unwrap().is_none());
    let err = agent.fork_session(&fork, 5).await.unwrap_err();
    assert!(
        matches!(
            &err,
            agent_loop::Error::Session(SessionError::InvalidPoint { .. })
        ),
        "{err}"
    );
    // After the result: a copy, read back through another connection.
    agent.fork_session(&fork, 3).await.unwrap();
    let other = backend.store().await;
    let forked = session::load(&*other, &fork).await.unwrap().unwrap();
    assert_eq!(forked.conversation.messages.len(), 3);
    assert_eq!(forked.conversation.system.as_deref(), Some("Be exact."));
    assert_eq!(forked.version, 1);
    // A taken id is not overwritten.
    assert!(matches!(
        other.fork(&id, 1, &fork).await,
        Err(SessionError::Conflict { .. })
    ));

    // The original goes on; the fork does not see it.
    let done = outcome(agent.run("say more")).await;
    assert_eq!(done.final_text, "more said");
    let forked = session::load(&*other, &fork).await.unwrap().unwrap();
    assert_eq!(forked.conversation.messages.len(), 3);

    // Rewound to the first answer: an entry of the log; what came before stays there.
    agent.rewind_session(4).await.unwrap();
    assert_eq!(agent.messages().len(), 4);
    let stored = other.load(&id).await.unwrap().unwrap();
    assert_eq!(
        stored.entries.last().unwrap().1,
        SessionEntry::Rewound { to: 4 }
    );
    let before: usize = stored
        .entries
        .iter()
        .filter_map(|(_, e)| match e {
            SessionEntry::Messages { messages, .. } => Some(messages),
            _ => None,
        })
        .flatten()
        .filter(|m| m.text().contains("say more"))
        .count();
    assert_eq!(before, 1, "the rewound turn is still in the log");
    let rewound = session::load(&*other, &id).await.unwrap().unwrap();
    assert_eq!(said(&rewound.conversation, "say more"), 0);

    // The next run builds on the rewound conversation.
    let done = outcome(agent.run("go on")).await;
    assert_eq!(done.final_text, "after the rewind");
    let now = session::load(&*other, &id).await.unwrap().unwrap();
    assert_eq!(now.conversation.messages.len(), 6);
    assert_eq!(said(&now.conversation, "say more"), 0);
    assert_eq!(said(&now.conversation, "go on"), 1);
    assert_eq!(&now.conversation.messages[..4], &agent.messages()[..4]);
}
