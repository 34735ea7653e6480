//! [`PostgresStore`]: sessions in PostgreSQL (cargo feature `postgres`), for processes on
//! several machines.
//!
//! The driver is `tokio-postgres` 0.7. [`PostgresStore::connect`] connects without TLS
//! (`NoTls`): fine on loopback, a Unix socket or a private network. For TLS, connect a
//! `tokio_postgres::Client` yourself with the TLS connector of your choice
//! (`postgres-native-tls`, `tokio-postgres-rustls`) and hand it to
//! [`PostgresStore::from_client`].
//!
//! # Schema
//!
//! ```sql
//! -- One row per migration applied; the schema's version is the highest.
//! CREATE TABLE agent_loop_schema (
//!     version    INTEGER PRIMARY KEY,
//!     applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
//! );
//! CREATE TABLE agent_loop_sessions (
//!     id         TEXT PRIMARY KEY,
//!     version    BIGINT NOT NULL,      -- the version of its last entry
//!     created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
//!     updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
//! );
//! CREATE TABLE agent_loop_entries (
//!     session_id TEXT NOT NULL REFERENCES agent_loop_sessions (id) ON DELETE CASCADE,
//!     version    BIGINT NOT NULL,      -- 1, 2, … within the session
//!     kind       TEXT NOT NULL,        -- conversation, messages, paused, resumed, lease, released
//!     format     INTEGER NOT NULL,     -- the entry format (ENTRY_FORMAT)
//!     body       TEXT NOT NULL,        -- the entry as JSON, kept byte for byte
//!     PRIMARY KEY (session_id, version)
//! );
//! -- Where loading starts: the newest conversation entry.
//! CREATE INDEX agent_loop_entries_conversations
//!     ON agent_loop_entries (session_id, version) WHERE kind = 'conversation';
//! ```
//!
//! The tables are created in the first schema of the connection's `search_path` (usually
//! `public`); to keep them in a schema of their own, create it and set the path in the URL:
//! `postgres://…/db?options=-c%20search_path%3Dagents`.
//!
//! Migrations run when a store connects, in one transaction that first takes a
//! transaction-level advisory lock (`pg_advisory_xact_lock(0x6167_656e_745f_6c70)`), so two
//! processes starting at once do not race to create the tables. A schema newer than this
//! build knows is refused with [`SessionError::Schema`], and left as it is.
//!
//! # Writes
//!
//! Every [`append`](SessionStore::append) is one transaction: a compare-and-swap on the
//! session's row (`UPDATE … SET version = $new WHERE id = $1 AND version = $expected`, or
//! `INSERT … ON CONFLICT DO NOTHING` for a new session), then one `INSERT` of the new
//! entries. A writer that lost the race updates no row, and gets
//! [`SessionError::Conflict`] with nothing written; the `(session_id, version)` primary key
//! is a second guard (a duplicate entry is a `Conflict` too). Only the new entries are
//! written, so a turn costs the same at turn 1,000 as at turn 10.
//!
//! A store holds one connection, used by one call at a time; connect several stores for
//! more. It does not reconnect: once the connection is lost, every call fails with
//! [`SessionError::Database`] and a new store must be connected. An append whose future is
//! dropped before it returns may or may not have been committed: load the session again
//! before writing to it.

use std::fmt;

use async_trait::async_trait;
use tokio::sync::Mutex;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls, Statement};

use crate::sql::{new_version, Rows};
use agent_loop::error::SessionError;
use agent_loop::session::{EncodedEntry, SessionEntry, SessionStore, StoredSession};

/// The advisory lock migrations run under ("agent_lp" in ASCII).
const MIGRATION_LOCK: i64 = 0x6167_656e_745f_6c70;

/// The migrations, in order: migration `i` takes the schema from version `i` to `i + 1`.
const MIGRATIONS: &[&str] = &[
    // 1: sessions and their entries.
    "CREATE TABLE agent_loop_sessions (
         id         TEXT PRIMARY KEY,
         version    BIGINT NOT NULL,
         created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
         updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
     );
     CREATE TABLE agent_loop_entries (
         session_id TEXT NOT NULL REFERENCES agent_loop_sessions (id) ON DELETE CASCADE,
         version    BIGINT NOT NULL,
         kind       TEXT NOT NULL,
         format     INTEGER NOT NULL,
         body       TEXT NOT NULL,
         PRIMARY KEY (session_id, version)
     );
     CREATE INDEX agent_loop_entries_conversations
         ON agent_loop_entries (session_id, version) WHERE kind = 'conversation';",
];

/// A [`SessionStore`] in PostgreSQL (cargo feature `postgres`): for processes on several
/// machines sharing sessions.
///
/// ```no_run
/// use agent_loop::session::{SessionEntry, SessionStore};
/// use agent_loop_sql::PostgresStore;
/// use agent_loop::context::Conversation;
///
/// # async fn run() -> Result<(), agent_loop::error::SessionError> {
/// let store = PostgresStore::connect("postgres://agent@db.internal/agents").await?;
/// let first = SessionEntry::Conversation { conversation: Conversation::default() };
/// let version = store.append("chat-1", 0, &[first]).await?;
/// let session = agent_loop::session::load(&store, "chat-1").await?.expect("stored");
/// assert_eq!(session.version, version);
/// # Ok(())
/// # }
/// ```
pub struct PostgresStore {
    inner: Mutex<Inner>,
}

struct Inner {
    client: Client,
    statements: Statements,
}

/// The statements every call uses, prepared once per connection.
struct Statements {
    load: Statement,
    version: Statement,
    create: Statement,
    update: Statement,
    insert: Statement,
    delete: Statement,
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore").finish_non_exhaustive()
    }
}

/// A driver error as a [`SessionError::Database`], with its causes (the server's message).
fn db(e: tokio_postgres::Error) -> SessionError {
    let mut message = format!("PostgreSQL: {e}");
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    SessionError::Database(message)
}

impl PostgresStore {
    /// Connects to the database at `url` (a `postgres://` URL or a `key=value` connection
    /// string, as [`tokio_postgres::Config`] reads them) without TLS, and brings its schema
    /// up to date. The connection runs on a task of the current tokio runtime.
    ///
    /// A schema newer than this build knows is [`SessionError::Schema`]; a URL that does
    /// not parse, or a server that cannot be reached, is [`SessionError::Database`].
    ///
    /// ```no_run
    /// use agent_loop_sql::PostgresStore;
    ///
    /// # async fn run() -> Result<(), agent_loop::error::SessionError> {
    /// // Tables in the schema `agents` (which must exist) rather than in `public`.
    /// let store = PostgresStore::connect(
    ///     "postgres://agent@127.0.0.1:5432/app?options=-c%20search_path%3Dagents",
    /// )
    /// .await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(url: &str) -> Result<Self, SessionError> {
        let (client, connection) = tokio_postgres::connect(url, NoTls).await.map_err(db)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::warn!(error = %e, "the session store's PostgreSQL connection ended");
            }
        });
        PostgresStore::from_client(client).await
    }

    /// A store on a connection you made: with TLS, or any setting [`connect`](Self::connect)
    /// does not offer. Spawn the connection's other half (the `Connection` future) before
    /// calling this. Brings the schema up to date, as `connect` does.
    ///
    /// ```no_run
    /// use agent_loop_sql::PostgresStore;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// let (client, connection) =
    ///     tokio_postgres::connect("host=/run/postgresql user=agent", tokio_postgres::NoTls)
    ///         .await?;
    /// tokio::spawn(connection);
    /// let store = PostgresStore::from_client(client).await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn from_client(mut client: Client) -> Result<Self, SessionError> {
        migrate(&mut client).await?;
        let statements = Statements::prepare(&client).await.map_err(db)?;
        Ok(PostgresStore {
            inner: Mutex::new(Inner { client, statements }),
        })
    }
}

/// The newest schema version this build knows.
fn supported() -> i64 {
    MIGRATIONS.len() as i64
}

async fn migrate(client: &mut Client) -> Result<(), SessionError> {
    let tx = client.transaction().await.map_err(db)?;
    // Held until the transaction ends: a second process starting at once waits here, then
    // finds the migrations applied.
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(db)?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS agent_loop_schema (
             version    INTEGER PRIMARY KEY,
             applied_at TIMESTAMPTZ NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(db)?;
    let current: i64 = tx
        .query_one(
            "SELECT coalesce(max(version), 0)::bigint FROM agent_loop_schema",
            &[],
        )
        .await
        .map_err(db)?
        .try_get(0)
        .map_err(db)?;
    if current > supported() {
        // Dropping the transaction rolls it back; nothing was changed.
        return Err(SessionError::Schema {
            found: current,
            supported: supported(),
        });
    }
    for (version, sql) in (1i32..)
        .zip(MIGRATIONS)
        .skip(usize::try_from(current).unwrap_or(0))
    {
        tx.batch_execute(sql).await.map_err(db)?;
        tx.execute(
            "INSERT INTO agent_loop_schema (version) VALUES ($1)",
            &[&version],
        )
        .await
        .map_err(db)?;
    }
    tx.commit().await.map_err(db)
}

impl Statements {
    async fn prepare(client: &Client) -> Result<Self, tokio_postgres::Error> {
        Ok(Statements {
            // One statement, so one snapshot: the session's version, where loading starts
            // (its newest conversation entry, found once through the partial index) and the
            // entries from there (a range of the primary key). A session without entries is
            // one row whose entry columns are NULL.
            load: client
                .prepare(
                    "WITH s AS MATERIALIZED (
                         SELECT id, version, coalesce((
                             SELECT c.version FROM agent_loop_entries c
                             WHERE c.session_id = $1 AND c.kind = 'conversation'
                             ORDER BY c.version DESC LIMIT 1
                         ), 1) AS start
                         FROM agent_loop_sessions WHERE id = $1
                     )
                     SELECT s.version, s.start, e.version, e.format, e.body
                     FROM s LEFT JOIN agent_loop_entries e
                         ON e.session_id = s.id AND e.version >= s.start
                     ORDER BY e.version",
                )
                .await?,
            version: client
                .prepare("SELECT version FROM agent_loop_sessions WHERE id = $1")
                .await?,
            create: client
                .prepare(
                    "INSERT INTO agent_loop_sessions (id, version) VALUES ($1, $2)
                     ON CONFLICT (id) DO NOTHING",
                )
                .await?,
            update: client
                .prepare(
                    "UPDATE agent_loop_sessions SET version = $2, updated_at = now()
                     WHERE id = $1 AND version = $3",
                )
                .await?,
            insert: client
                .prepare(
                    "INSERT INTO agent_loop_entries (session_id, version, kind, format, body)
                     SELECT $1, v, k, f, b
                     FROM unnest($2::bigint[], $3::text[], $4::integer[], $5::text[])
                         AS t (v, k, f, b)",
                )
                .await?,
            delete: client
                .prepare("DELETE FROM agent_loop_sessions WHERE id = $1")
                .await?,
        })
    }
}

impl Inner {
    async fn load(&mut self, session: &str) -> Result<Option<StoredSession>, SessionError> {
        let rows = self
            .client
            .query(&self.statements.load, &[&session])
            .await
            .map_err(db)?;
        let Some(first) = rows.first() else {
            return Ok(None);
        };
        let mut entries = Rows::new(
            session,
            first.try_get(0).map_err(db)?,
            first.try_get(1).map_err(db)?,
        )?;
        for row in &rows {
            // The session with no entries at all: one row, its entry columns NULL.
            let Some(version) = row.try_get::<_, Option<i64>>(2).map_err(db)? else {
                continue;
            };
            let format: i32 = row.try_get(3).map_err(db)?;
            let body: &str = row.try_get(4).map_err(db)?;
            entries.push(version, format.into(), Ok(body))?;
        }
        entries.finish().map(Some)
    }

    async fn append(
        &mut self,
        session: &str,
        expected: u64,
        entries: &[EncodedEntry],
    ) -> Result<u64, SessionError> {
        let Inner { client, statements } = self;
        let conflict = |found: Option<u64>| SessionError::Conflict {
            session: session.to_owned(),
            expected,
            found,
        };
        // A version past what the column holds is no version any session has.
        let (Ok(expected_i64), Some(new)) = (
            i64::try_from(expected),
            new_version(expected, entries.len()),
        ) else {
            let found = current_version(client, statements, session).await?;
            return Err(conflict(found));
        };
        let tx = client.transaction().await.map_err(db)?;
        let mut swapped = 0;
        if expected == 0 {
            swapped = tx
                .execute(&statements.create, &[&session, &new])
                .await
                .map_err(db)?;
        }
        if swapped == 0 {
            swapped = tx
                .execute(&statements.update, &[&session, &new, &expected_i64])
                .await
                .map_err(db)?;
        }
        if swapped == 0 {
            tx.rollback().await.map_err(db)?;
            let found = current_version(client, statements, session).await?;
            return Err(conflict(found));
        }
        if !entries.is_empty() {
            let versions: Vec<i64> = (expected_i64 + 1..=new).collect();
            let kinds: Vec<&str> = entries.iter().map(|e| e.kind).collect();
            let formats: Vec<i32> = entries
                .iter()
                .map(|e| i32::try_from(e.format).unwrap_or(i32::MAX))
                .collect();
            let bodies: Vec<&str> = entries.iter().map(|e| e.body.as_str()).collect();
            let inserted = tx
                .execute(
                    &statements.insert,
                    &[&session, &versions, &kinds, &formats, &bodies],
                )
                .await;
            if let Err(e) = inserted {
                // The second guard: an entry already at one of these versions.
                if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
                    tx.rollback().await.map_err(db)?;
                    let found = current_version(client, statements, session).await?;
                    return Err(conflict(found));
                }
                return Err(db(e));
            }
        }
        tx.commit().await.map_err(db)?;
        Ok(new as u64)
    }
}

/// The session's version as it stands, for a [`SessionError::Conflict`].
async fn current_version(
    client: &Client,
    statements: &Statements,
    session: &str,
) -> Result<Option<u64>, SessionError> {
    let row = client
        .query_opt(&statements.version, &[&session])
        .await
        .map_err(db)?;
    row.map(|row| {
        let version: i64 = row.try_get(0).map_err(db)?;
        u64::try_from(version).map_err(|_| {
            agent_loop::error::SessionError::corrupt(
                session,
                0,
                format!("the session's version is {version}"),
            )
        })
    })
    .transpose()
}

#[async_trait]
impl SessionStore for PostgresStore {
    async fn load(&self, session: &str) -> Result<Option<StoredSession>, SessionError> {
        self.inner.lock().await.load(session).await
    }

    async fn append(
        &self,
        session: &str,
        expected: u64,
        entries: &[SessionEntry],
    ) -> Result<u64, SessionError> {
        let entries: Vec<EncodedEntry> = entries.iter().map(SessionEntry::encode).collect();
        self.inner
            .lock()
            .await
            .append(session, expected, &entries)
            .await
    }

    async fn delete(&self, session: &str) -> Result<(), SessionError> {
        let inner = self.inner.lock().await;
        // Its entries go with it (ON DELETE CASCADE), in the same statement.
        inner
            .client
            .execute(&inner.statements.delete, &[&session])
            .await
            .map_err(db)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_bad_url_or_no_server_is_a_database_error() {
        let err = PostgresStore::connect("postgres://[nonsense")
            .await
            .unwrap_err();
        assert!(matches!(err, SessionError::Database(_)), "{err}");
        assert!(err.to_string().contains("PostgreSQL"), "{err}");
        // Port 1 on loopback: nothing listens there.
        let err = PostgresStore::connect("postgres://postgres@127.0.0.1:1/postgres")
            .await
            .unwrap_err();
        assert!(matches!(err, SessionError::Database(_)), "{err}");
        assert!(err.to_string().contains("connect"), "{err}");
    }
}
