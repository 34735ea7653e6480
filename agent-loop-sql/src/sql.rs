//! What the SQL stores share: reading a session's rows back into a [`StoredSession`], with
//! every row checked (a bad row is [`SessionError::Corrupt`], never a panic).

use agent_loop::error::SessionError;
use agent_loop::session::{SessionEntry, StoredSession};

/// Collects the rows of one session's `load`: its version, then its entries from the newest
/// `conversation` one on, in order. Checks that they fit the session's version: no entry
/// missing, none past it.
pub(super) struct Rows<'a> {
    session: &'a str,
    version: u64,
    /// The version the next row must have.
    next: u64,
    entries: Vec<(u64, SessionEntry)>,
}

impl<'a> Rows<'a> {
    /// A session at `version` whose load starts at entry `from` (its newest `conversation`
    /// entry, 1 when it has none).
    pub(super) fn new(session: &'a str, version: i64, from: i64) -> Result<Self, SessionError> {
        let version = u64::try_from(version).map_err(|_| {
            agent_loop::error::SessionError::corrupt(
                session,
                0,
                format!("the session's version is negative ({version})"),
            )
        })?;
        let from = u64::try_from(from)
            .ok()
            .filter(|&v| v >= 1)
            .ok_or_else(|| {
                agent_loop::error::SessionError::corrupt(
                    session,
                    0,
                    format!("an entry has version {from}"),
                )
            })?;
        Ok(Rows {
            session,
            version,
            next: from,
            entries: Vec::new(),
        })
    }

    /// The next row: entry `version`, written in `format`; `body` is its text, or why the
    /// stored value is no text.
    pub(super) fn push(
        &mut self,
        version: i64,
        format: i64,
        body: Result<&str, String>,
    ) -> Result<(), SessionError> {
        let Ok(version) = u64::try_from(version) else {
            return Err(agent_loop::error::SessionError::corrupt(
                self.session,
                0,
                format!("an entry has version {version}"),
            ));
        };
        if version > self.version {
            return Err(agent_loop::error::SessionError::corrupt(
                self.session,
                version,
                format!(
                    "the entry is past the session's version ({}): the session's row and its \
                     entries disagree",
                    self.version
                ),
            ));
        }
        if version != self.next {
            return Err(agent_loop::error::SessionError::corrupt(
                self.session,
                self.next,
                "the entry is missing from the session's log",
            ));
        }
        let body = body
            .map_err(|why| agent_loop::error::SessionError::corrupt(self.session, version, why))?;
        let entry = SessionEntry::decode(self.session, version, format, body)?;
        self.entries.push((version, entry));
        self.next += 1;
        Ok(())
    }

    /// The session, once every row was pushed.
    pub(super) fn finish(self) -> Result<StoredSession, SessionError> {
        // A session with entries must have them up to its version (the replay reports a
        // session with none at all).
        if !self.entries.is_empty() && self.next <= self.version {
            return Err(agent_loop::error::SessionError::corrupt(
                self.session,
                self.next,
                "the entry is missing from the session's log",
            ));
        }
        Ok(StoredSession {
            version: self.version,
            entries: self.entries,
        })
    }
}

/// `entries.len()` entries appended after `expected`: the new version, if it is one a
/// database's signed 64-bit column holds.
pub(super) fn new_version(expected: u64, added: usize) -> Option<i64> {
    let added = u64::try_from(added).ok()?;
    let new = expected.checked_add(added)?;
    i64::try_from(new).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_loop::context::Conversation;

    fn conversation() -> String {
        SessionEntry::Conversation {
            conversation: Conversation::default(),
        }
        .encode()
        .body
    }

    #[test]
    fn rows_must_run_without_gaps_up_to_the_sessions_version() {
        let body = conversation();
        let mut rows = Rows::new("s", 2, 1).unwrap();
        rows.push(1, 1, Ok(&body)).unwrap();
        rows.push(2, 1, Ok(&body)).unwrap();
        assert_eq!(rows.finish().unwrap().entries.len(), 2);

        let mut gap = Rows::new("s", 3, 1).unwrap();
        gap.push(1, 1, Ok(&body)).unwrap();
        let err = gap.push(3, 1, Ok(&body)).unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { version: 2, .. }),
            "{err}"
        );

        let mut short = Rows::new("s", 3, 1).unwrap();
        short.push(1, 1, Ok(&body)).unwrap();
        let err = short.finish().unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { version: 2, .. }),
            "{err}"
        );

        let mut past = Rows::new("s", 1, 1).unwrap();
        past.push(1, 1, Ok(&body)).unwrap();
        let err = past.push(2, 1, Ok(&body)).unwrap_err();
        assert!(
            matches!(err, SessionError::Corrupt { version: 2, .. }),
            "{err}"
        );

        let mut blob = Rows::new("s", 1, 1).unwrap();
        let err = blob.push(1, 1, Err("a blob".into())).unwrap_err();
        assert!(err.to_string().contains("a blob"), "{err}");

        assert!(Rows::new("s", -1, 1).is_err());
        assert!(Rows::new("s", 1, 0).is_err());
        assert!(Rows::new("s", 1, 1)
            .unwrap()
            .push(-4, 1, Ok(&body))
            .is_err());
        assert_eq!(
            Rows::new("s", 0, 1).unwrap().finish().unwrap(),
            StoredSession {
                version: 0,
                entries: vec![]
            }
        );
    }

    #[test]
    fn new_versions_fit_a_signed_column() {
        assert_eq!(new_version(0, 1), Some(1));
        assert_eq!(new_version(5, 3), Some(8));
        assert_eq!(new_version(i64::MAX as u64, 1), None);
        assert_eq!(new_version(u64::MAX, 1), None);
    }
}
