//! [`SqliteStore`]: sessions in an SQLite file (cargo feature `sqlite`, on by default).
//!
//! SQLite is compiled into the crate (rusqlite's `bundled` build): no system library is
//! needed. The file is opened in WAL mode with a busy timeout, so several processes can
//! share it: readers never wait, and writers take turns.
//!
//! # Schema
//!
//! ```sql
//! -- One row per migration applied; the schema's version is the highest.
//! CREATE TABLE agent_loop_schema (
//!     version    INTEGER PRIMARY KEY,
//!     applied_at TEXT NOT NULL
//! ) STRICT;
//! CREATE TABLE agent_loop_sessions (
//!     id         TEXT PRIMARY KEY,
//!     version    INTEGER NOT NULL,     -- the version of its last entry
//!     created_at TEXT NOT NULL,        -- RFC 3339, UTC
//!     updated_at TEXT NOT NULL
//! ) STRICT;
//! CREATE TABLE agent_loop_entries (
//!     session_id TEXT NOT NULL REFERENCES agent_loop_sessions (id) ON DELETE CASCADE,
//!     version    INTEGER NOT NULL,     -- 1, 2, … within the session
//!     kind       TEXT NOT NULL,        -- conversation, messages, paused, resumed, lease, released
//!     format     INTEGER NOT NULL,     -- the entry format (ENTRY_FORMAT)
//!     body       TEXT NOT NULL,        -- the entry as JSON
//!     PRIMARY KEY (session_id, version)
//! ) STRICT;
//! -- Where loading starts: the newest conversation entry.
//! CREATE INDEX agent_loop_entries_conversations
//!     ON agent_loop_entries (session_id, version) WHERE kind = 'conversation';
//! ```
//!
//! The tables are `STRICT` (SQLite checks each column's type): other programs reading the
//! file need SQLite 3.37 or newer.
//!
//! Migrations are applied in order when a store opens the file, in one write transaction (so
//! two processes opening a new file at once do not both apply them). A file whose schema is
//! newer than this build knows is refused with [`SessionError::Schema`], and left as it is.
//!
//! # Writes
//!
//! Every [`append`](SessionStore::append) is one `BEGIN IMMEDIATE` transaction: it reads the
//! session's version, refuses with [`SessionError::Conflict`] when it is not the one
//! expected, and otherwise inserts the entries and sets the new version. Only the new entries
//! are written, so a turn costs the same at turn 1,000 as at turn 10. `synchronous` is left at
//! `FULL`: a write that returned is on disk. Each store holds one connection, used by one
//! task at a time (the work runs in [`tokio::task::spawn_blocking`]); clones share it, and
//! several stores opened on one file have one each. The blocking work runs to its end even
//! when the future waiting for it is dropped: an append whose future was dropped may have
//! been committed, so load the session again before writing to it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use crate::sql::{new_version, Rows};
use agent_loop::error::SessionError;
use agent_loop::session::{EncodedEntry, SessionEntry, SessionStore, StoredSession};

/// How long a write waits for another connection's write to finish before it fails with
/// `database is locked`.
const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// The migrations, in order: migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: sessions and their entries.
    "CREATE TABLE agent_loop_sessions (
         id         TEXT PRIMARY KEY,
         version    INTEGER NOT NULL,
         created_at TEXT NOT NULL,
         updated_at TEXT NOT NULL
     ) STRICT;
     CREATE TABLE agent_loop_entries (
         session_id TEXT NOT NULL REFERENCES agent_loop_sessions (id) ON DELETE CASCADE,
         version    INTEGER NOT NULL,
         kind       TEXT NOT NULL,
         format     INTEGER NOT NULL,
         body       TEXT NOT NULL,
         PRIMARY KEY (session_id, version)
     ) STRICT;
     CREATE INDEX agent_loop_entries_conversations
         ON agent_loop_entries (session_id, version) WHERE kind = 'conversation';",
];

/// The current time as SQL: RFC 3339 in UTC, with milliseconds.
const NOW: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// A [`SessionStore`] in an SQLite file (cargo feature `sqlite`): the embedded default, for
/// one machine. Several processes may open the same file.
///
/// ```
/// use agent_loop::session::{SessionEntry, SessionStore};
/// use agent_loop_sql::SqliteStore;
/// use agent_loop::context::Conversation;
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let path = std::env::temp_dir().join(format!("agent-loop-doc-{}.db", std::process::id()));
/// let store = SqliteStore::open(&path).await?;
///
/// let first = SessionEntry::Conversation { conversation: Conversation::default() };
/// assert_eq!(store.append("chat-1", 0, &[first]).await?, 1);
/// // A writer that builds on an old version is refused.
/// let again = SessionEntry::Conversation { conversation: Conversation::default() };
/// assert!(store.append("chat-1", 0, &[again]).await.unwrap_err().is_conflict());
///
/// let session = agent_loop::session::load(&store, "chat-1").await?.expect("stored");
/// assert_eq!(session.version, 1);
/// # drop(store);
/// # for suffix in ["", "-wal", "-shm"] {
/// #     let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
/// # }
/// # Ok::<(), agent_loop::error::SessionError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    conn: Arc<Mutex<Connection>>,
    path: PathBuf,
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteStore {
    /// Opens (creating it if needed) the database file at `path` and brings its schema up to
    /// date. `":memory:"` opens a private in-memory database.
    ///
    /// A schema newer than this build knows is [`SessionError::Schema`]; a file that cannot
    /// be opened, or is no SQLite database, is [`SessionError::Database`]. Call it inside a
    /// tokio runtime (the file is opened on its blocking pool).
    ///
    /// ```
    /// use agent_loop::session::SessionStore;
    /// use agent_loop_sql::SqliteStore;
    ///
    /// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
    /// let store = SqliteStore::open(":memory:").await?;
    /// assert_eq!(store.load("nothing-yet").await?, None);
    /// # Ok::<(), agent_loop::error::SessionError>(())
    /// # }).unwrap();
    /// ```
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, SessionError> {
        let path = path.as_ref().to_owned();
        let opened = path.clone();
        let conn = blocking(move || open_blocking(&opened)).await?;
        Ok(SqliteStore {
            conn: Arc::new(Mutex::new(conn)),
            path,
        })
    }

    /// Runs `f` on the connection, on tokio's blocking pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, SessionError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T, SessionError> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        blocking(move || f(&mut lock(&conn))).await
    }
}

/// Runs `f` on tokio's blocking pool; a task that panicked is a [`SessionError::Database`].
async fn blocking<T, F>(f: F) -> Result<T, SessionError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, SessionError> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| SessionError::Database(format!("SQLite task failed: {e}")))?
}

/// The connection. A task that panicked while holding it left no transaction open (a
/// transaction rolls back when dropped), so a poisoned lock is still a usable connection.
fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    conn.lock().unwrap_or_else(|e| e.into_inner())
}

fn db(e: rusqlite::Error) -> SessionError {
    SessionError::Database(format!("SQLite: {e}"))
}

fn open_blocking(path: &Path) -> Result<Connection, SessionError> {
    let mut conn = Connection::open(path).map_err(db)?;
    conn.busy_timeout(BUSY_TIMEOUT).map_err(db)?;
    // `wal`, or `memory` for an in-memory database (which has no WAL).
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "wal", |row| row.get(0))
        .map_err(db)?;
    if mode != "wal" && mode != "memory" {
        return Err(SessionError::Database(format!(
            "SQLite: {} cannot be put in WAL mode (it stays in {mode} mode)",
            path.display()
        )));
    }
    conn.pragma_update(None, "synchronous", "full")
        .map_err(db)?;
    conn.pragma_update(None, "foreign_keys", true).map_err(db)?;
    migrate(&mut conn)?;
    Ok(conn)
}

/// The newest schema version this build knows.
fn supported() -> i64 {
    MIGRATIONS.len() as i64
}

fn migrate(conn: &mut Connection) -> Result<(), SessionError> {
    // A write transaction from the start: two processes opening a new file at once take
    // turns, and the second finds the migrations applied.
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db)?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS agent_loop_schema (
             version    INTEGER PRIMARY KEY,
             applied_at TEXT NOT NULL
         ) STRICT;",
    )
    .map_err(db)?;
    let current: i64 = tx
        .query_row(
            "SELECT coalesce(max(version), 0) FROM agent_loop_schema",
            [],
            |row| row.get(0),
        )
        .map_err(db)?;
    if current > supported() {
        return Err(SessionError::Schema {
            found: current,
            supported: supported(),
        });
    }
    for (version, sql) in (1..)
        .zip(MIGRATIONS)
        .skip(usize::try_from(current).unwrap_or(0))
    {
        tx.execute_batch(sql).map_err(db)?;
        tx.execute(
            &format!("INSERT INTO agent_loop_schema (version, applied_at) VALUES (?1, {NOW})"),
            [version],
        )
        .map_err(db)?;
    }
    tx.commit().map_err(db)
}

/// An integer column, or why the stored value is none.
fn integer(value: ValueRef<'_>, column: &str) -> Result<i64, String> {
    match value {
        ValueRef::Integer(i) => Ok(i),
        other => Err(format!(
            "its {column} is {:?}, not an integer",
            other.data_type()
        )),
    }
}

/// A text column, or why the stored value is none.
fn text<'a>(value: ValueRef<'a>, column: &str) -> Result<&'a str, String> {
    match value {
        ValueRef::Text(bytes) => {
            std::str::from_utf8(bytes).map_err(|e| format!("its {column} is not UTF-8: {e}"))
        }
        other => Err(format!("its {column} is {:?}, not text", other.data_type())),
    }
}

fn load_blocking(
    conn: &mut Connection,
    session: &str,
) -> Result<Option<StoredSession>, SessionError> {
    // One read transaction: the version and the entries come from the same snapshot, even
    // while other processes write.
    let tx = conn.transaction().map_err(db)?;
    let version = tx
        .prepare_cached("SELECT version FROM agent_loop_sessions WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([session], |row| Ok(integer(row.get_ref(0)?, "version")))
                .optional()
        })
        .map_err(db)?;
    let Some(version) = version else {
        return Ok(None);
    };
    let version = version.map_err(|why| {
        agent_loop::error::SessionError::corrupt(session, 0, format!("the session's row: {why}"))
    })?;
    // Uses the partial index on conversation entries.
    let from = tx
        .prepare_cached(
            "SELECT version FROM agent_loop_entries
             WHERE session_id = ?1 AND kind = 'conversation'
             ORDER BY version DESC LIMIT 1",
        )
        .and_then(|mut stmt| {
            stmt.query_row([session], |row| Ok(integer(row.get_ref(0)?, "version")))
                .optional()
        })
        .map_err(db)?
        .transpose()
        .map_err(|why| {
            agent_loop::error::SessionError::corrupt(
                session,
                0,
                format!("a conversation entry: {why}"),
            )
        })?
        .unwrap_or(1);
    let mut rows = Rows::new(session, version, from)?;
    let mut stmt = tx
        .prepare_cached(
            "SELECT version, format, body FROM agent_loop_entries
             WHERE session_id = ?1 AND version >= ?2 ORDER BY version",
        )
        .map_err(db)?;
    let mut query = stmt.query(rusqlite::params![session, from]).map_err(db)?;
    while let Some(row) = query.next().map_err(db)? {
        let entry_version = integer(row.get_ref(0).map_err(db)?, "version").map_err(|why| {
            agent_loop::error::SessionError::corrupt(session, 0, format!("an entry: {why}"))
        })?;
        let version_u64 = u64::try_from(entry_version).unwrap_or(0);
        let format = integer(row.get_ref(1).map_err(db)?, "format")
            .map_err(|why| agent_loop::error::SessionError::corrupt(session, version_u64, why))?;
        let body = text(row.get_ref(2).map_err(db)?, "body");
        rows.push(entry_version, format, body)?;
    }
    rows.finish().map(Some)
}

fn append_blocking(
    conn: &mut Connection,
    session: &str,
    expected: u64,
    entries: &[EncodedEntry],
) -> Result<u64, SessionError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db)?;
    let found = tx
        .prepare_cached("SELECT version FROM agent_loop_sessions WHERE id = ?1")
        .and_then(|mut stmt| {
            stmt.query_row([session], |row| Ok(integer(row.get_ref(0)?, "version")))
                .optional()
        })
        .map_err(db)?
        .transpose()
        .map_err(|why| {
            agent_loop::error::SessionError::corrupt(
                session,
                0,
                format!("the session's row: {why}"),
            )
        })?;
    let found = found
        .map(|v| {
            u64::try_from(v).map_err(|_| {
                agent_loop::error::SessionError::corrupt(
                    session,
                    0,
                    format!("the session's version is {v}"),
                )
            })
        })
        .transpose()?;
    if found.unwrap_or(0) != expected {
        return Err(SessionError::Conflict {
            session: session.to_owned(),
            expected,
            found,
        });
    }
    let new = new_version(expected, entries.len()).ok_or_else(|| {
        SessionError::Database(format!(
            "session {session:?}: its version would pass the largest one stored"
        ))
    })?;
    let upsert = if found.is_some() {
        format!("UPDATE agent_loop_sessions SET version = ?2, updated_at = {NOW} WHERE id = ?1")
    } else {
        format!(
            "INSERT INTO agent_loop_sessions (id, version, created_at, updated_at)
             VALUES (?1, ?2, {NOW}, {NOW})"
        )
    };
    tx.prepare_cached(&upsert)
        .and_then(|mut stmt| stmt.execute(rusqlite::params![session, new]))
        .map_err(db)?;
    {
        let mut insert = tx
            .prepare_cached(
                "INSERT INTO agent_loop_entries (session_id, version, kind, format, body)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
            )
            .map_err(db)?;
        // `new` fits an i64, and so does every version before it.
        let first = new - entries.len() as i64 + 1;
        for (version, entry) in (first..).zip(entries) {
            insert
                .execute(rusqlite::params![
                    session,
                    version,
                    entry.kind,
                    entry.format,
                    entry.body
                ])
                .map_err(|e| match e.sqlite_error_code() {
                    // An entry at that version already: a row the session's version does not
                    // count (the session's version is the guard; this is the second one).
                    Some(rusqlite::ErrorCode::ConstraintViolation) => SessionError::Conflict {
                        session: session.to_owned(),
                        expected,
                        found,
                    },
                    _ => db(e),
                })?;
        }
    }
    tx.commit().map_err(db)?;
    Ok(new as u64)
}

fn delete_blocking(conn: &mut Connection, session: &str) -> Result<(), SessionError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(db)?;
    // The entries too, explicitly: another program may have the file open without
    // foreign keys enforced.
    for sql in [
        "DELETE FROM agent_loop_entries WHERE session_id = ?1",
        "DELETE FROM agent_loop_sessions WHERE id = ?1",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut stmt| stmt.execute([session]))
            .map_err(db)?;
    }
    tx.commit().map_err(db)
}

#[async_trait]
impl SessionStore for SqliteStore {
    async fn load(&self, session: &str) -> Result<Option<StoredSession>, SessionError> {
        let session = session.to_owned();
        self.with_conn(move |conn| load_blocking(conn, &session))
            .await
    }

    async fn append(
        &self,
        session: &str,
        expected: u64,
        entries: &[SessionEntry],
    ) -> Result<u64, SessionError> {
        let session = session.to_owned();
        let entries: Vec<EncodedEntry> = entries.iter().map(SessionEntry::encode).collect();
        self.with_conn(move |conn| append_blocking(conn, &session, expected, &entries))
            .await
    }

    async fn delete(&self, session: &str) -> Result<(), SessionError> {
        let session = session.to_owned();
        self.with_conn(move |conn| delete_blocking(conn, &session))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_loop::context::Conversation;

    fn temp_path(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::env::temp_dir().join(format!(
            "agent-loop-unit-{name}-{}-{nanos}.db",
            std::process::id()
        ))
    }

    fn remove(path: &Path) {
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime")
            .block_on(f)
    }

    #[test]
    fn opening_applies_the_migrations_once_and_turns_on_wal() {
        let path = temp_path("migrations");
        block_on(async {
            let store = SqliteStore::open(&path).await.unwrap();
            let first = SessionEntry::Conversation {
                conversation: Conversation::default(),
            };
            store.append("s", 0, &[first]).await.unwrap();
            drop(store);
            // Again: nothing to apply, the data stays.
            let store = SqliteStore::open(&path).await.unwrap();
            assert_eq!(store.load("s").await.unwrap().unwrap().version, 1);
        });
        let conn = Connection::open(&path).unwrap();
        let versions: Vec<i64> = conn
            .prepare("SELECT version FROM agent_loop_schema ORDER BY version")
            .unwrap()
            .query_map([], |row| row.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(versions, (1..=supported()).collect::<Vec<_>>());
        let mode: String = conn
            .query_row("PRAGMA journal_mode", [], |row| row.get(0))
            .unwrap();
        assert_eq!(mode, "wal");
        drop(conn);
        remove(&path);
    }

    #[test]
    fn loading_finds_the_newest_conversation_through_its_index() {
        let conn = open_blocking(Path::new(":memory:")).unwrap();
        let plan: Vec<String> = conn
            .prepare(
                "EXPLAIN QUERY PLAN SELECT version FROM agent_loop_entries
                 WHERE session_id = ?1 AND kind = 'conversation'
                 ORDER BY version DESC LIMIT 1",
            )
            .unwrap()
            .query_map(["s"], |row| row.get::<_, String>(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(
            plan.iter()
                .any(|step| step.contains("USING COVERING INDEX agent_loop_entries_conversations")),
            "{plan:?}"
        );
    }

    #[test]
    fn a_newer_schema_is_refused_and_left_alone() {
        let path = temp_path("schema");
        block_on(async {
            drop(SqliteStore::open(&path).await.unwrap());
            let conn = Connection::open(&path).unwrap();
            conn.execute(
                "INSERT INTO agent_loop_schema (version, applied_at) VALUES (?1, 'later')",
                [supported() + 1],
            )
            .unwrap();
            drop(conn);
            let err = SqliteStore::open(&path).await.unwrap_err();
            assert_eq!(
                err,
                SessionError::Schema {
                    found: supported() + 1,
                    supported: supported()
                }
            );
        });
        remove(&path);
    }

    #[test]
    fn a_file_that_is_no_database_is_a_database_error() {
        let path = temp_path("garbage");
        std::fs::write(
            &path,
            b"this is not an SQLite file, and it is long enough to tell",
        )
        .unwrap();
        let err = block_on(SqliteStore::open(&path)).unwrap_err();
        assert!(matches!(err, SessionError::Database(_)), "{err}");
        remove(&path);
    }
}
