//! The pause_resume example's scenario, run through the public API with the example's own
//! code (included with `#[path]`).

#[allow(dead_code, unreachable_pub)]
#[path = "../examples/pause_resume.rs"]
mod pause_resume;

use agent_loop::{ContentBlock, Message};

/// Each tool call of `messages` with its result: name, content, whether an error.
fn tool_results(messages: &[Message]) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for pair in messages.windows(2) {
        let [asked, answered] = pair else { continue };
        for (id, name, _) in asked.tool_uses() {
            for block in &answered.content {
                if let ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error,
                    ..
                } = block
                {
                    if tool_use_id == id {
                        out.push((name.to_owned(), content.clone(), *is_error));
                    }
                }
            }
        }
    }
    out
}

/// The pause_resume example's halves, on one SQLite file: the first pauses (the delete has
/// not run), the second approves and finishes, a third finds nothing waiting; and a denial.
#[tokio::test]
async fn pause_resume_pauses_saves_and_resumes_from_the_file() {
    for approve in [true, false] {
        let db = std::env::temp_dir().join(format!(
            "agent-loop-example-{}-{approve}.db",
            std::process::id()
        ));
        let pause = pause_resume::pause_half(&db).await.unwrap();
        assert!(pause.is_some_and(|id| id.contains("call_1")));
        let answer = pause_resume::resume_half(&db, approve).await.unwrap();
        // The scripted model answers the same either way; the history says what happened.
        assert_eq!(answer, "Done: old.log is deleted.");
        let store = agent_loop_sql::SqliteStore::open(&db).await.unwrap();
        let session = agent_loop::session::load(&store, "pause-resume-demo")
            .await
            .unwrap()
            .unwrap();
        let results = tool_results(&session.conversation.messages);
        let expected = if approve {
            (
                "delete_file".to_owned(),
                "deleted old.log".to_owned(),
                false,
            )
        } else {
            (
                "delete_file".to_owned(),
                "denied: the person said no".to_owned(),
                true,
            )
        };
        assert_eq!(results, [expected]);
        assert_eq!(session.pause, None);
        assert_eq!(pause_resume::resume_half(&db, approve).await.unwrap(), "");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", db.display()));
        }
    }
}
