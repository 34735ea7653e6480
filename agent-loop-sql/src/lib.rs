//! SQL session stores for [`agent_loop`]: an agent's conversations and paused runs kept in a
//! database, so a run can pause in one process and resume in another, and many processes
//! can share sessions.
//!
//! - [`SqliteStore`] (feature `sqlite`, on by default): the embedded store. SQLite is
//!   compiled in (no system library); a file path is all it needs, and several processes of
//!   one machine can share the file.
//! - [`PostgresStore`] (feature `postgres`): for processes on several machines.
//!
//! Both implement [`agent_loop::session::SessionStore`]: an append-only log of entries per
//! session, written with compare-and-swap on its version, in one transaction per append.
//! Give one to an agent with [`AgentBuilder::session`](agent_loop::AgentBuilder::session):
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use agent_loop::testing::{ScriptedClient, ScriptedResponse};
//! use agent_loop::Agent;
//! use agent_loop_sql::SqliteStore;
//!
//! let path = std::env::temp_dir().join(format!("agent-loop-doc-{}.db", std::process::id()));
//! let store = Arc::new(SqliteStore::open(&path).await?);
//! let client = ScriptedClient::new([ScriptedResponse::text("Hello!")]);
//! let mut agent = Agent::builder(client).session(store.clone(), "chat-1").build()?;
//! assert_eq!(agent.prompt("Hi").await?, "Hello!");
//!
//! // Another process with the same file picks the conversation up where it stands.
//! let session = agent_loop::session::load(&*store, "chat-1").await?.expect("saved");
//! assert_eq!(session.conversation.messages.len(), 2);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```
//!
//! The stores' schemas and how they write are in the [`sqlite`] and [`postgres`] modules.
//! `cargo run -p agent-loop-sql --example pause_resume` pauses a run for approval in one
//! process, saved to SQLite, and resumes it in another.
#![warn(missing_docs, unreachable_pub)]

#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PostgresStore;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
