//! The sans-IO half of the A2A client: the agent card (its URL, its reading, the tool name
//! and description made of it), JSON-RPC answers and stream events, and what they tell of a
//! remote task ([`Progress`]: its ids, state, status text and artifacts, and how it ended).
//! No I/O and no clock: the async half in `client.rs` feeds it bytes and values.

use agent_loop::wire::sse::SseEvent;
use serde_json::Value;

/// The most of an HTTP error's body quoted in the error (bytes).
pub(super) const MAX_ERROR_BODY_BYTES: usize = 1024;
/// The most artifacts of one task kept apart (a peer could name any number).
pub(super) const MAX_ARTIFACTS: usize = 256;
/// The most skills listed in the tool's description.
pub(super) const MAX_SKILLS_LISTED: usize = 32;
/// The longest tool description made from a card (bytes).
pub(super) const MAX_DESCRIPTION_BYTES: usize = 4096;
/// The most of a status message's text kept (bytes): a failure's reason, a question.
pub(super) const MAX_STATUS_BYTES: usize = 64 * 1024;

/// A skill of a remote agent, from its card.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSkill {
    /// The skill's id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its tags.
    pub tags: Vec<String>,
    /// Example requests.
    pub examples: Vec<String>,
}

/// What a remote agent's card says, as far as this client reads it.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteCard {
    /// The agent's name.
    pub name: String,
    /// What it does.
    pub description: String,
    /// Its version.
    pub version: String,
    /// Its skills.
    pub skills: Vec<RemoteSkill>,
    /// Whether it streams (`capabilities.streaming`): without it, calls use `SendMessage`.
    pub streaming: bool,
    /// The JSON-RPC endpoint calls go to: the card's first A2A 1.x JSON-RPC interface (or
    /// [`RemoteAgentBuilder::endpoint`](super::RemoteAgentBuilder::endpoint)).
    pub endpoint: String,
}

/// The remote task a message goes to (for a reply to a task that asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct TaskIds {
    pub(super) task_id: String,
    pub(super) context_id: Option<String>,
}

/// How a call's exchange with the remote agent ended.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum End {
    /// Completed, with the answer.
    Completed(String),
    /// Failed or rejected (the state, and the status message's text).
    Failed { state: String, why: Option<String> },
    /// Cancelled (by the remote side: ours does not get here).
    Canceled { why: Option<String> },
    /// Waits for input (`input-required`) or authorization (`auth-required`).
    Asks {
        state: String,
        question: Option<String>,
        task: TaskIds,
    },
}

/// The card's URL: `url` itself when it names a `.json` file, else the well-known path
/// under it.
pub(super) fn card_url(url: &str) -> Result<reqwest::Url, String> {
    let parsed =
        reqwest::Url::parse(url.trim()).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url:?} is not an http(s) URL"));
    }
    if parsed.path().ends_with(".json") {
        return Ok(parsed);
    }
    let mut base = parsed;
    let path = format!(
        "{}/.well-known/agent-card.json",
        base.path().trim_end_matches('/')
    );
    base.set_path(&path);
    base.set_query(None);
    Ok(base)
}

/// Reads an agent card; an error saying what is wrong with it.
pub(super) fn parse_card(body: &[u8], card_url: &reqwest::Url) -> Result<RemoteCard, String> {
    let card: Value = serde_json::from_slice(body).map_err(|e| format!("it is not JSON ({e})"))?;
    let Some(card) = card.as_object() else {
        return Err("it is not a JSON object".to_owned());
    };
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_owned();
    let name = text(card.get("name"));
    if name.trim().is_empty() {
        return Err("it has no name".to_owned());
    }
    let strings = |v: Option<&Value>| -> Vec<String> {
        v.and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let skills = card
        .get("skills")
        .and_then(Value::as_array)
        .map(|skills| {
            skills
                .iter()
                .filter(|s| s.is_object())
                .map(|s| RemoteSkill {
                    id: text(s.get("id")),
                    name: text(s.get("name")),
                    description: text(s.get("description")),
                    tags: strings(s.get("tags")),
                    examples: strings(s.get("examples")),
                })
                .collect()
        })
        .unwrap_or_default();
    let streaming = card
        .get("capabilities")
        .and_then(|c| c.get("streaming"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let interfaces = card
        .get("supportedInterfaces")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let jsonrpc_1 = interfaces.iter().find(|i| {
        let binding = i.get("protocolBinding").and_then(Value::as_str);
        let version = i.get("protocolVersion").and_then(Value::as_str);
        binding.is_some_and(|b| b.eq_ignore_ascii_case("JSONRPC"))
            && version.is_none_or(|v| v == "1" || v.starts_with("1."))
            && i.get("url").is_some_and(Value::is_string)
    });
    let Some(interface) = jsonrpc_1 else {
        let offered: Vec<String> = interfaces
            .iter()
            .map(|i| {
                format!(
                    "{} {}",
                    i.get("protocolBinding")
                        .and_then(Value::as_str)
                        .unwrap_or("?"),
                    i.get("protocolVersion")
                        .and_then(Value::as_str)
                        .unwrap_or("?")
                )
            })
            .collect();
        let offered = if offered.is_empty() {
            "no supportedInterfaces (a pre-1.0 card?)".to_owned()
        } else {
            offered.join(", ")
        };
        return Err(format!(
            "it names no A2A 1.x JSON-RPC interface (it offers: {offered}); this client \
             speaks A2A 1.0 over JSON-RPC"
        ));
    };
    let url = text(interface.get("url"));
    let endpoint = card_url
        .join(&url)
        .map_err(|e| format!("its interface URL {url:?} is not a URL: {e}"))?;
    Ok(RemoteCard {
        name,
        description: text(card.get("description")),
        version: text(card.get("version")),
        skills,
        streaming,
        endpoint: endpoint.to_string(),
    })
}

/// Whether `name` fits the tool-name rule `^[a-zA-Z0-9_-]{1,64}$`.
pub(super) fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A card's name made to fit the tool-name rule: each run of other characters becomes one
/// `_`, none at the ends, at most 64 bytes; `remote_agent` when nothing is left.
pub(super) fn tool_name(card_name: &str) -> String {
    let mut name = String::new();
    let mut gap = false;
    for c in card_name.chars() {
        if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
            if gap && !name.is_empty() {
                name.push('_');
            }
            gap = false;
            name.push(c);
        } else {
            gap = true;
        }
        if name.len() >= 64 {
            break;
        }
    }
    name.truncate(64);
    let name = name.trim_end_matches('_');
    if name.is_empty() {
        "remote_agent".to_owned()
    } else {
        name.to_owned()
    }
}

/// The tool's description made from the card: its description, then its skills.
pub(super) fn describe(card: &RemoteCard) -> String {
    let mut text = String::new();
    let description = card.description.trim();
    if description.is_empty() {
        text.push_str(&format!("The remote agent {:?}.", card.name));
    } else {
        text.push_str(description);
    }
    text.push_str(&format!(
        "\n\n(A remote A2A agent, {:?}: give it the whole task in `task`; it sees nothing \
         else of this conversation.)",
        card.name
    ));
    if !card.skills.is_empty() {
        text.push_str("\nSkills:");
        for skill in card.skills.iter().take(MAX_SKILLS_LISTED) {
            let name = if skill.name.trim().is_empty() {
                &skill.id
            } else {
                &skill.name
            };
            text.push_str(&format!("\n- {}", name.trim()));
            if !skill.description.trim().is_empty() {
                text.push_str(&format!(": {}", skill.description.trim()));
            }
            if let Some(example) = skill.examples.first() {
                text.push_str(&format!(" (for example: {:?})", example));
            }
        }
        if card.skills.len() > MAX_SKILLS_LISTED {
            text.push_str(&format!(
                "\n- … and {} more",
                card.skills.len() - MAX_SKILLS_LISTED
            ));
        }
    }
    cut(&mut text, MAX_DESCRIPTION_BYTES);
    text
}

/// Cuts `text` to at most `max` bytes, on a character boundary.
pub(super) fn cut(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
}

/// The result of one JSON-RPC response body; an error for a JSON-RPC error (its code and
/// message) or a body that is not a JSON-RPC response.
pub(super) fn rpc_result(body: &[u8]) -> Result<Value, String> {
    let response: Value =
        serde_json::from_slice(body).map_err(|e| format!("its answer is not JSON ({e})"))?;
    rpc_value(response)
}

pub(super) fn rpc_value(mut response: Value) -> Result<Value, String> {
    if let Some(error) = response.get("error").filter(|e| !e.is_null()) {
        let code = error.get("code").and_then(Value::as_i64);
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        let mut message = message.to_owned();
        cut(&mut message, MAX_ERROR_BODY_BYTES);
        return Err(match code {
            Some(code) => format!("it answered with error {code}: {message}"),
            None => format!("it answered with an error: {message}"),
        });
    }
    match response.get_mut("result") {
        Some(result) => Ok(result.take()),
        None => Err("its answer is not a JSON-RPC response (no result, no error)".to_owned()),
    }
}

/// The result an SSE event carries (`None` for an event without data); an error for an
/// `error` event or a JSON-RPC error.
pub(super) fn stream_result(event: &SseEvent) -> Result<Option<Value>, String> {
    if event.data.trim().is_empty() {
        return Ok(None);
    }
    let value: Value = serde_json::from_str(&event.data)
        .map_err(|e| format!("an event of its stream is not JSON ({e})"))?;
    if event.event == "error" && value.get("error").is_none() {
        return Err(format!("its stream sent an error: {}", value));
    }
    rpc_value(value).map(Some)
}

/// A task state's name in the spec's lower-case form: `TASK_STATE_INPUT_REQUIRED` and
/// `input-required` are both `input-required`.
pub(super) fn state_name(state: &str) -> String {
    let state = state.strip_prefix("TASK_STATE_").unwrap_or(state);
    state.to_ascii_lowercase().replace('_', "-")
}

/// What happened in an event, for the nested events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Note {
    /// A status message's text (the remote's progress).
    Status(String),
    /// Text added to an artifact; `new_artifact` when it starts another artifact.
    Text { text: String, new_artifact: bool },
}

/// The remote task as the events so far tell it (sans-IO).
#[derive(Debug)]
pub(super) struct Progress {
    pub(super) task_id: Option<String>,
    pub(super) context_id: Option<String>,
    /// The state, in the lower-case form ([`state_name`]).
    pub(super) state: Option<String>,
    /// The text of the latest status message.
    status_text: Option<String>,
    artifacts: Artifacts,
    /// The answer, when the remote answered with a message rather than a task.
    message: Option<String>,
}

impl Progress {
    pub(super) fn new(max_answer_bytes: usize) -> Self {
        Progress {
            task_id: None,
            context_id: None,
            state: None,
            status_text: None,
            artifacts: Artifacts::new(max_answer_bytes),
            message: None,
        }
    }

    /// Takes one result: `{"task"}`, `{"message"}`, `{"statusUpdate"}` or
    /// `{"artifactUpdate"}` (A2A 1.0), or the same kinded by `"kind"` (before 1.0); the notes
    /// of what it adds go to `notes`.
    pub(super) fn apply(&mut self, result: &Value, notes: &mut Vec<Note>) -> Result<(), String> {
        let kind = result.get("kind").and_then(Value::as_str);
        if let Some(task) = result.get("task").or(kinded(result, kind, "task")) {
            self.take_task(task, notes);
        } else if let Some(message) = result.get("message").or(kinded(result, kind, "message")) {
            let mut text = parts_text(message.get("parts"));
            cut(&mut text, self.artifacts.max_bytes);
            self.message = Some(text.clone());
            if !text.is_empty() {
                notes.push(Note::Text {
                    text,
                    new_artifact: false,
                });
            }
        } else if let Some(update) =
            result
                .get("statusUpdate")
                .or(kinded(result, kind, "status-update"))
        {
            self.take_ids(update, "taskId");
            self.take_status(update.get("status"), notes);
        } else if let Some(update) =
            result
                .get("artifactUpdate")
                .or(kinded(result, kind, "artifact-update"))
        {
            self.take_ids(update, "taskId");
            let append = update.get("append").and_then(Value::as_bool) == Some(true);
            if let Some(artifact) = update.get("artifact") {
                let id = artifact
                    .get("artifactId")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let text = parts_text(artifact.get("parts"));
                if let Some(note) = self.artifacts.update(id, &text, append) {
                    notes.push(note);
                }
            }
        } else {
            return Err(format!(
                "an event is none of task, message, statusUpdate, artifactUpdate: {}",
                preview(result)
            ));
        }
        Ok(())
    }

    fn take_ids(&mut self, value: &Value, task_key: &str) {
        if let Some(id) = value.get(task_key).and_then(Value::as_str) {
            if self.task_id.is_none() && !id.is_empty() {
                self.task_id = Some(id.to_owned());
            }
        }
        if let Some(id) = value.get("contextId").and_then(Value::as_str) {
            if self.context_id.is_none() && !id.is_empty() {
                self.context_id = Some(id.to_owned());
            }
        }
    }

    fn take_task(&mut self, task: &Value, notes: &mut Vec<Note>) {
        self.take_ids(task, "id");
        if let Some(artifacts) = task.get("artifacts").and_then(Value::as_array) {
            self.artifacts.replace_all(artifacts);
        }
        self.take_status(task.get("status"), notes);
    }

    fn take_status(&mut self, status: Option<&Value>, notes: &mut Vec<Note>) {
        let Some(status) = status else {
            return;
        };
        if let Some(state) = status.get("state").and_then(Value::as_str) {
            self.state = Some(state_name(state));
        }
        if let Some(message) = status.get("message").filter(|m| m.is_object()) {
            let mut text = parts_text(message.get("parts"));
            cut(&mut text, MAX_STATUS_BYTES);
            if !text.is_empty() && self.status_text.as_ref() != Some(&text) {
                notes.push(Note::Status(text.clone()));
            }
            self.status_text = Some(text);
        }
    }

    /// How the task ended, once it has: a final state, a question, or a message answer.
    pub(super) fn end(&self) -> Option<End> {
        if self.task_id.is_none() {
            return self.message.clone().map(End::Completed);
        }
        let why = self.status_text.clone().filter(|t| !t.is_empty());
        let state = self.state.as_deref()?;
        Some(match state {
            "completed" => {
                let answer = self.artifacts.joined();
                End::Completed(if answer.is_empty() {
                    why.or_else(|| self.message.clone()).unwrap_or_default()
                } else {
                    answer
                })
            }
            "failed" | "rejected" => End::Failed {
                state: state.to_owned(),
                why,
            },
            "canceled" | "cancelled" => End::Canceled { why },
            "input-required" | "auth-required" => End::Asks {
                state: state.to_owned(),
                question: why,
                task: TaskIds {
                    task_id: self.task_id.clone()?,
                    context_id: self.context_id.clone(),
                },
            },
            _ => return None,
        })
    }
}

/// `value` when its pre-1.0 `kind` is `wanted`.
pub(super) fn kinded<'a>(value: &'a Value, kind: Option<&str>, wanted: &str) -> Option<&'a Value> {
    (kind == Some(wanted)).then_some(value)
}

/// The start of a value's JSON, for an error message.
pub(super) fn preview(value: &Value) -> String {
    let mut text = value.to_string();
    if text.len() > 200 {
        cut(&mut text, 200);
        text.push('…');
    }
    text
}

/// The text of a message's or artifact's parts: text parts' texts run together (an appended
/// chunk is a part of its own, so the streamed text and the stored artifact read the same),
/// each other part on a line of its own: a data part's JSON, a url part's URL; a raw part is
/// named, not copied.
pub(super) fn parts_text(parts: Option<&Value>) -> String {
    let Some(parts) = parts.and_then(Value::as_array) else {
        return String::new();
    };
    let mut text = String::new();
    let mut after_text = false;
    for part in parts {
        if let Some(piece) = part.get("text").and_then(Value::as_str) {
            text.push_str(piece);
            after_text = true;
            continue;
        }
        let piece = if let Some(data) = part.get("data") {
            data.to_string()
        } else if let Some(url) = part.get("url").and_then(Value::as_str) {
            url.to_owned()
        } else if let Some(uri) = part
            .get("file")
            .and_then(|f| f.get("uri"))
            .and_then(Value::as_str)
        {
            uri.to_owned()
        } else if part.get("raw").is_some() || part.get("file").is_some() {
            let media = part
                .get("mediaType")
                .and_then(Value::as_str)
                .unwrap_or("a file");
            format!("[{media}: left out]")
        } else {
            continue;
        };
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&piece);
        text.push('\n');
        after_text = false;
    }
    if !after_text && text.ends_with('\n') {
        text.pop();
    }
    text
}

/// A task's artifacts, joined as the chunks say (sans-IO, bounded).
#[derive(Debug)]
pub(super) struct Artifacts {
    /// (artifact id, text), in the order they started. Invariant: at most [`MAX_ARTIFACTS`]
    /// entries, and the texts' bytes sum to at most `max_bytes`.
    items: Vec<(String, String)>,
    max_bytes: usize,
    /// Text was dropped to stay within `max_bytes` (or `MAX_ARTIFACTS`).
    cut: bool,
    /// The artifact the last text note was about.
    last: Option<String>,
}

impl Artifacts {
    fn new(max_bytes: usize) -> Self {
        Artifacts {
            items: Vec::new(),
            max_bytes,
            cut: false,
            last: None,
        }
    }

    fn bytes(&self) -> usize {
        self.items.iter().map(|(_, t)| t.len()).sum()
    }

    /// Takes a chunk of artifact `id`: appended to it with `append`, else replacing it (or
    /// starting it). The note of the text added.
    fn update(&mut self, id: &str, text: &str, append: bool) -> Option<Note> {
        let index = match self.items.iter().position(|(i, _)| i == id) {
            Some(index) => {
                if !append {
                    self.items[index].1.clear();
                }
                index
            }
            None => {
                if self.items.len() >= MAX_ARTIFACTS {
                    self.cut = true;
                    return None;
                }
                self.items.push((id.to_owned(), String::new()));
                self.items.len() - 1
            }
        };
        let room = self.max_bytes.saturating_sub(self.bytes());
        let mut added = text.to_owned();
        if added.len() > room {
            cut(&mut added, room);
            self.cut = true;
        }
        self.items[index].1.push_str(&added);
        if added.is_empty() {
            return None;
        }
        let new_artifact = self.last.as_deref() != Some(id);
        let first = self.last.is_none();
        self.last = Some(id.to_owned());
        Some(Note::Text {
            text: added,
            new_artifact: new_artifact && !first,
        })
    }

    /// Takes a task's whole list of artifacts (no notes: what was streamed stands).
    fn replace_all(&mut self, artifacts: &[Value]) {
        self.items.clear();
        for artifact in artifacts {
            let id = artifact
                .get("artifactId")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let text = parts_text(artifact.get("parts"));
            let last = self.last.take();
            self.update(id, &text, false);
            self.last = last;
        }
    }

    /// The answer: the artifacts' texts, a blank line between two; a note at the end when
    /// some was cut.
    fn joined(&self) -> String {
        let texts: Vec<&str> = self
            .items
            .iter()
            .map(|(_, t)| t.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        let mut answer = texts.join("\n\n");
        if self.cut {
            answer.push_str(&format!(
                "\n[… the remote agent's answer was cut at {} bytes]",
                self.max_bytes
            ));
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn url() -> reqwest::Url {
        reqwest::Url::parse("http://127.0.0.1:9/.well-known/agent-card.json").unwrap()
    }

    #[test]
    fn the_card_url_is_the_well_known_path_or_the_url_given() {
        let at = |u: &str| card_url(u).unwrap().to_string();
        assert_eq!(at("http://h:1"), "http://h:1/.well-known/agent-card.json");
        assert_eq!(
            at("http://h:1/agents/x/"),
            "http://h:1/agents/x/.well-known/agent-card.json"
        );
        assert_eq!(at("https://h/card.json"), "https://h/card.json");
        assert!(card_url("ftp://h").is_err());
        assert!(card_url("not a url").is_err());
    }

    #[test]
    fn a_card_gives_the_name_skills_streaming_and_the_jsonrpc_interface() {
        let card = json!({
            "name": "Weather Oracle (python)", "description": "Answers about weather.",
            "version": "2.0",
            "supportedInterfaces": [
                {"url": "http://h/grpc", "protocolBinding": "GRPC", "protocolVersion": "1.0"},
                {"url": "http://h/old", "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
                {"url": "/a2a", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
            ],
            "capabilities": {"streaming": true},
            "skills": [{"id": "f", "name": "Forecast", "description": "Tomorrow.",
                        "tags": ["w"], "examples": ["Rain in Oslo?"]}]
        });
        let card = parse_card(card.to_string().as_bytes(), &url()).unwrap();
        assert_eq!(card.name, "Weather Oracle (python)");
        assert_eq!(card.endpoint, "http://127.0.0.1:9/a2a");
        assert!(card.streaming);
        assert_eq!(card.skills[0].examples, ["Rain in Oslo?"]);
        assert_eq!(tool_name(&card.name), "Weather_Oracle_python");
        let description = describe(&card);
        assert!(
            description.starts_with("Answers about weather."),
            "{description}"
        );
        assert!(
            description.contains("- Forecast: Tomorrow. (for example: \"Rain in Oslo?\")"),
            "{description}"
        );
        // No streaming capability said: SendMessage.
        let plain = json!({"name": "x", "supportedInterfaces":
            [{"url": "http://h/a2a", "protocolBinding": "JSONRPC"}], "capabilities": {}});
        assert!(
            !parse_card(plain.to_string().as_bytes(), &url())
                .unwrap()
                .streaming
        );
    }

    #[test]
    fn a_card_without_a_1_x_jsonrpc_interface_says_what_it_offers() {
        let legacy = json!({"name": "x", "url": "http://h/", "protocolVersion": "0.3.0"});
        let e = parse_card(legacy.to_string().as_bytes(), &url()).unwrap_err();
        assert!(e.contains("no supportedInterfaces"), "{e}");
        let grpc = json!({"name": "x", "supportedInterfaces":
            [{"url": "http://h", "protocolBinding": "GRPC", "protocolVersion": "1.0"}]});
        let e = parse_card(grpc.to_string().as_bytes(), &url()).unwrap_err();
        assert!(e.contains("GRPC 1.0"), "{e}");
        assert!(parse_card(b"[]", &url())
            .unwrap_err()
            .contains("not a JSON object"));
        assert!(parse_card(b"{\"name\": \" \"}", &url())
            .unwrap_err()
            .contains("no name"));
    }

    #[test]
    fn tool_names_fit_the_rule() {
        assert_eq!(tool_name("adder"), "adder");
        assert_eq!(tool_name("  Café — bot!! "), "Caf_bot");
        assert_eq!(tool_name("???"), "remote_agent");
        assert_eq!(tool_name(&"x".repeat(100)).len(), 64);
        assert_eq!(tool_name("a__b"), "a__b");
        assert!(valid_tool_name("ok-name_1"));
        assert!(!valid_tool_name(""));
        assert!(!valid_tool_name("a b"));
    }

    #[test]
    fn chunks_join_as_append_and_replace_say() {
        let mut artifacts = Artifacts::new(1000);
        let notes: Vec<_> = [
            artifacts.update("a", "The answer ", false),
            artifacts.update("a", "is 42.", true),
            artifacts.update("b", "Second.", false),
            artifacts.update("a", "Replaced.", false),
        ]
        .into_iter()
        .flatten()
        .collect();
        assert_eq!(artifacts.joined(), "Replaced.\n\nSecond.");
        assert_eq!(
            notes[2],
            Note::Text {
                text: "Second.".to_owned(),
                new_artifact: true
            }
        );
        assert_eq!(
            notes[0],
            Note::Text {
                text: "The answer ".to_owned(),
                new_artifact: false
            }
        );
    }

    #[test]
    fn the_answer_is_cut_at_its_limit_and_says_so() {
        let mut artifacts = Artifacts::new(10);
        artifacts.update("a", "0123456789abc", false);
        artifacts.update("a", "more", true);
        assert_eq!(
            artifacts.joined(),
            "0123456789\n[… the remote agent's answer was cut at 10 bytes]"
        );
        let mut many = Artifacts::new(1 << 20);
        for i in 0..MAX_ARTIFACTS + 10 {
            many.update(&i.to_string(), "x", false);
        }
        assert_eq!(many.items.len(), MAX_ARTIFACTS);
    }

    #[test]
    fn a_streamed_task_ends_with_its_state() {
        let mut progress = Progress::new(1000);
        let mut notes = Vec::new();
        let events = [
            json!({"task": {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING",
                "message": {"role": "ROLE_AGENT", "parts": [{"text": "Looking"}]}}}}),
            json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "4"}]}}}),
            json!({"artifactUpdate": {"taskId": "t1", "artifact": {"artifactId": "a", "parts": [{"text": "2"}]},
                "append": true, "lastChunk": true}}),
        ];
        for event in &events {
            progress.apply(event, &mut notes).unwrap();
            assert_eq!(progress.end(), None);
        }
        progress
            .apply(
                &json!({"statusUpdate": {"taskId": "t1", "status": {"state": "TASK_STATE_COMPLETED"}}}),
                &mut notes,
            )
            .unwrap();
        assert_eq!(progress.end(), Some(End::Completed("42".to_owned())));
        assert_eq!(notes[0], Note::Status("Looking".to_owned()));

        let mut asks = Progress::new(1000);
        asks.apply(
            &json!({"kind": "status-update", "taskId": "t2", "contextId": "c2",
                "status": {"state": "input-required", "message": {"parts": [{"kind": "text", "text": "Which city?"}]}}}),
            &mut notes,
        )
        .unwrap();
        assert_eq!(
            asks.end(),
            Some(End::Asks {
                state: "input-required".to_owned(),
                question: Some("Which city?".to_owned()),
                task: TaskIds {
                    task_id: "t2".to_owned(),
                    context_id: Some("c2".to_owned())
                }
            })
        );
        let mut message = Progress::new(1000);
        message
            .apply(
                &json!({"message": {"parts": [{"text": "Hi"}, {"data": {"a": 1}}]}}),
                &mut notes,
            )
            .unwrap();
        assert_eq!(
            message.end(),
            Some(End::Completed("Hi\n{\"a\":1}".to_owned()))
        );
        let parts = json!([{"text": "The answer "}, {"text": "is 42."}, {"url": "http://x"}, {"text": "!"}]);
        assert_eq!(parts_text(Some(&parts)), "The answer is 42.\nhttp://x\n!");
        assert!(Progress::new(10)
            .apply(&json!({"x": 1}), &mut notes)
            .is_err());
    }

    #[test]
    fn json_rpc_errors_and_stream_errors_are_errors() {
        let e = rpc_result(br#"{"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"nope"}}"#)
            .unwrap_err();
        assert_eq!(e, "it answered with error -32001: nope");
        assert!(rpc_result(b"{}").is_err());
        assert!(rpc_result(b"nope").is_err());
        let event = SseEvent {
            event: "error".to_owned(),
            data: "{\"detail\": \"boom\"}".to_owned(),
            id: None,
            retry: None,
        };
        assert!(stream_result(&event).unwrap_err().contains("boom"));
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-zA-Z0-9 ._-]{0,8}".prop_map(Value::from),
            prop::sample::select(vec![
                "TASK_STATE_COMPLETED",
                "TASK_STATE_INPUT_REQUIRED",
                "input-required",
                "failed",
                "TASK_STATE_WORKING",
                "JSONRPC",
                "1.0",
                "http://h/a2a",
                "/x",
            ])
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(4, 48, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
                prop::collection::btree_map(
                    prop::sample::select(vec![
                        "task",
                        "message",
                        "statusUpdate",
                        "artifactUpdate",
                        "kind",
                        "id",
                        "taskId",
                        "contextId",
                        "status",
                        "state",
                        "artifacts",
                        "artifact",
                        "artifactId",
                        "parts",
                        "text",
                        "data",
                        "url",
                        "raw",
                        "append",
                        "lastChunk",
                        "name",
                        "description",
                        "skills",
                        "supportedInterfaces",
                        "protocolBinding",
                        "protocolVersion",
                        "capabilities",
                        "streaming",
                        "examples",
                        "result",
                        "error",
                        "code",
                    ])
                    .prop_map(str::to_owned),
                    inner,
                    0..6
                )
                .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        /// Any bytes as a card, a JSON-RPC answer or an event: a value or an error, never a
        /// panic.
        #[test]
        fn any_bytes_parse_or_fail(body in prop::collection::vec(any::<u8>(), 0..96)) {
            let _ = parse_card(&body, &url());
            let _ = rpc_result(&body);
            let event = SseEvent {
                event: "message".to_owned(),
                data: String::from_utf8_lossy(&body).into_owned(),
                id: None,
                retry: None,
            };
            let _ = stream_result(&event);
        }

        /// Any JSON as a card: a card whose tool name fits the rule, or an error.
        #[test]
        fn any_card_json_is_a_card_or_an_error(value in json_value(), name in ".{0,80}") {
            let mut value = value;
            if let Some(object) = value.as_object_mut() {
                object.insert("name".to_owned(), Value::from(name));
            }
            if let Ok(card) = parse_card(value.to_string().as_bytes(), &url()) {
                prop_assert!(valid_tool_name(&tool_name(&card.name)));
                prop_assert!(describe(&card).len() <= MAX_DESCRIPTION_BYTES);
            }
        }

        /// Any events: no panic, and the answer kept stays within its limit (plus the note
        /// that says it was cut).
        #[test]
        fn any_events_keep_the_answer_bounded(events in prop::collection::vec(json_value(), 0..12)) {
            let mut progress = Progress::new(64);
            let mut notes = Vec::new();
            for event in &events {
                let _ = progress.apply(event, &mut notes);
                let _ = progress.end();
            }
            prop_assert!(progress.artifacts.bytes() <= 64);
            prop_assert!(progress.artifacts.items.len() <= MAX_ARTIFACTS);
            if let Some(End::Completed(answer)) = progress.end() {
                prop_assert!(answer.len() <= 64 + 80 || progress.message.is_some() || progress.status_text.is_some());
            }
        }

        /// Any names: the tool name fits the rule.
        #[test]
        fn any_name_makes_a_valid_tool_name(name in "\\PC{0,100}") {
            prop_assert!(valid_tool_name(&tool_name(&name)));
        }

        /// Chunks with append join to their concatenation, whatever their split.
        #[test]
        fn appended_chunks_join_to_the_whole(text in "[a-z ]{0,40}", cuts in prop::collection::vec(0usize..40, 0..5)) {
            let mut points: Vec<usize> = cuts.into_iter().filter(|&c| c <= text.len()).collect();
            points.sort_unstable();
            points.dedup();
            let mut artifacts = Artifacts::new(1000);
            let mut start = 0;
            for (i, &p) in points.iter().chain(std::iter::once(&text.len())).enumerate() {
                artifacts.update("a", &text[start..p], i > 0);
                start = p;
            }
            prop_assert_eq!(artifacts.joined(), text);
        }
    }
}
