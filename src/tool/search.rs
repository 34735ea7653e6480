//! Tool search for large tool sets: above a threshold, a request carries a search tool and the
//! tools the run has used or found, not every schema; the search is BM25 over the tools'
//! names and descriptions, in the crate (no model call), so it works with every format.
//!
//! Turned on with [`RequestSettings::tool_search`](crate::RequestSettings::tool_search).
//! When the agent has more tools than [`ToolSearch::threshold`], each request carries:
//!
//! - `search_tools` (`{"query": "…"}`), which the agent answers itself with the best
//!   matches' names and descriptions;
//! - every tool the conversation has called or a search has found (read from the history, so
//!   a paused, resumed or restored run carries the same set), and the tool a named
//!   `tool_choice` asks for.
//!
//! A tool a search finds is callable from the next response on (it is in the next request);
//! a call of a tool the request did not carry still runs, as every registered tool does.
//!
//! ```
//! use agent_loop::tool::search::{ToolIndex, ToolSearch};
//! use agent_loop::tool::ToolSpec;
//! use serde_json::json;
//!
//! let spec = |name: &str, description: &str| ToolSpec {
//!     name: name.into(), description: description.into(), input_schema: json!({"type": "object"}),
//! };
//! let tools = [spec("get_weather", "Current weather for a city"),
//!              spec("create_issue", "Opens a GitHub issue"),
//!              spec("send_email", "Sends an email message")];
//! let index = ToolIndex::new(&tools);
//! assert_eq!(index.search("weather forecast", 2), ["get_weather"]);
//! assert_eq!(ToolSearch::default().threshold, 32);
//! ```

use std::collections::{BTreeSet, HashMap};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{ContentBlock, Message, ToolSpec};

/// The search tool's name.
pub const SEARCH_TOOL: &str = "search_tools";
/// The first line of a search's result; what follows are `name: description` lines.
const RESULT_HEADER: &str = "Tools found (callable from your next response):";
/// A query is cut here (bytes), and to this many terms.
const MAX_QUERY_BYTES: usize = 1_000;
const MAX_QUERY_TERMS: usize = 64;
/// The most results one search returns.
const MAX_RESULTS: u32 = 20;
/// BM25's parameters (the usual ones).
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// How tool search works for an agent: above how many tools, and how many results a search
/// returns.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ToolSearch {
    /// With more tools than this, requests carry the search tool and the tools used or found
    /// instead of every tool (default 32).
    pub threshold: usize,
    /// The most tools one search returns (default 5, at most 20).
    pub max_results: u32,
    /// Whether to use the provider's hosted search where it offers one (default `false`):
    /// every tool not yet used or found goes with `defer_loading: true` beside the provider's
    /// search tool instead of `search_tools` — Anthropic's `tool_search_tool_bm25`, OpenAI
    /// Responses' `{"type": "tool_search"}` (executed by the server) — and the model may call
    /// a tool it finds in the same response. The search's output items (Anthropic's
    /// `server_tool_use` and `tool_search_tool_result` blocks, OpenAI's `tool_search_call`
    /// and `tool_search_output` items) are kept in the assistant message and sent back as
    /// they came; the other formats leave them out. A tool an OpenAI search loaded counts as
    /// found. The request then still carries every schema (deferred tools are not put in the
    /// model's context), so it saves input tokens, not request bytes. Chat Completions,
    /// Gemini, Bedrock and Ollama search locally either way.
    pub hosted: bool,
}

impl Default for ToolSearch {
    fn default() -> Self {
        ToolSearch {
            threshold: 32,
            max_results: 5,
            hosted: false,
        }
    }
}

impl ToolSearch {
    /// The defaults: above 32 tools, 5 results a search.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets the threshold.
    pub fn threshold(mut self, tools: usize) -> Self {
        self.threshold = tools;
        self
    }

    /// Sets how many tools a search returns (1 to 20).
    pub fn max_results(mut self, results: u32) -> Self {
        self.max_results = results.clamp(1, MAX_RESULTS);
        self
    }

    /// Uses the provider's hosted tool search where it has one (see [`hosted`](Self::hosted)).
    pub fn hosted(mut self, hosted: bool) -> Self {
        self.hosted = hosted;
        self
    }

    /// Whether a set of `tools` is searched rather than sent whole.
    pub fn applies(&self, tools: usize) -> bool {
        tools > self.threshold
    }

    /// The tools a request carries out of `tools` (every one, at or under the threshold):
    /// the search tool, then, in `tools`' order, those the history called or found and the
    /// one `keep` names.
    pub fn select(
        &self,
        tools: Vec<ToolSpec>,
        history: &[Message],
        keep: Option<&str>,
    ) -> Vec<ToolSpec> {
        self.split(tools, history, keep).0
    }

    /// [`select`](Self::select)'s tools, and the others (the ones a hosted search defers; empty
    /// at or under the threshold).
    pub fn split(
        &self,
        tools: Vec<ToolSpec>,
        history: &[Message],
        keep: Option<&str>,
    ) -> (Vec<ToolSpec>, Vec<ToolSpec>) {
        if !self.applies(tools.len()) {
            return (tools, Vec::new());
        }
        let loaded = loaded(history);
        let hidden = tools.len();
        let mut carried = vec![search_spec(hidden)];
        let mut deferred = Vec::new();
        for tool in tools {
            if loaded.contains(tool.name.as_str()) || keep == Some(tool.name.as_str()) {
                carried.push(tool);
            } else {
                deferred.push(tool);
            }
        }
        (carried, deferred)
    }

    /// The answer to a call of the search tool with `input`, over `tools`: the text of its
    /// result and whether it is an error.
    pub fn answer(&self, tools: &[ToolSpec], input: &Value) -> (String, bool) {
        let Some(query) = input.get("query").and_then(Value::as_str) else {
            return (
                "invalid arguments: \"query\" (a string: the capability you need, in a few \
                 keywords) is required"
                    .to_owned(),
                true,
            );
        };
        let limit = input
            .get("max_results")
            .and_then(Value::as_u64)
            .map_or(self.max_results, |n| {
                n.clamp(1, u64::from(MAX_RESULTS)) as u32
            });
        let found = ToolIndex::new(tools).search(query, limit as usize);
        if found.is_empty() {
            return (
                format!("No tool matches {:?}; try other keywords.", cut(query, 200)),
                false,
            );
        }
        let mut text = String::from(RESULT_HEADER);
        for name in found {
            if let Some(tool) = tools.iter().find(|t| t.name == name) {
                text.push('\n');
                text.push_str(&tool.name);
                text.push_str(": ");
                text.push_str(&cut(&tool.description, 300));
            }
        }
        (text, false)
    }
}

fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// The search tool as a request carries it; `hidden` is how many tools it searches.
pub fn search_spec(hidden: usize) -> ToolSpec {
    ToolSpec {
        name: SEARCH_TOOL.to_owned(),
        description: format!(
            "Searches the {hidden} tools available to you that are not listed here, by what \
             they do. Describe the capability you need in a few keywords; the matching tools \
             become callable from your next response. Tools you have used stay available."
        ),
        input_schema: serde_json::json!({
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "What the tool should do, in keywords."},
                "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                                "description": "How many tools to return (default 5)."}
            },
            "required": ["query"]
        }),
    }
}

/// The tools the history called, those its searches found, and the functions OpenAI's
/// hosted search loaded (the `tools` of a `tool_search_output` item, namespaces' included).
fn loaded(history: &[Message]) -> BTreeSet<&str> {
    let mut names = BTreeSet::new();
    let mut searches: BTreeSet<&str> = BTreeSet::new();
    for message in history {
        for block in &message.content {
            match block {
                ContentBlock::ToolUse { id, name, .. } => {
                    if name == SEARCH_TOOL {
                        searches.insert(id.as_str());
                    } else {
                        names.insert(name.as_str());
                    }
                }
                ContentBlock::ToolResult {
                    tool_use_id,
                    content,
                    is_error: false,
                    ..
                } if searches.contains(tool_use_id.as_str()) => {
                    if let Some(rest) = content.strip_prefix(RESULT_HEADER) {
                        names.extend(
                            rest.lines()
                                .filter_map(|line| line.split_once(": ").map(|(name, _)| name)),
                        );
                    }
                }
                ContentBlock::Other(item)
                    if item.get("type").and_then(Value::as_str) == Some("tool_search_output") =>
                {
                    hosted_loaded(item.get("tools"), &mut names);
                }
                _ => {}
            }
        }
    }
    names
}

/// The names of the functions in a `tool_search_output`'s `tools`, and in its namespaces'
/// `tools` (namespaces hold functions, not namespaces).
fn hosted_loaded<'a>(tools: Option<&'a Value>, names: &mut BTreeSet<&'a str>) {
    let list = |tools: Option<&'a Value>| tools.and_then(Value::as_array).into_iter().flatten();
    let is = |tool: &Value, kind: &str| tool.get("type").and_then(Value::as_str) == Some(kind);
    let name = |tool: &'a Value| tool.get("name").and_then(Value::as_str);
    for tool in list(tools) {
        let inner = list(tool.get("tools")).filter(|_| is(tool, "namespace"));
        for function in std::iter::once(tool).chain(inner) {
            if let Some(name) = name(function).filter(|_| is(function, "function")) {
                names.insert(name);
            }
        }
    }
}

/// A BM25 index over tools' names and descriptions.
#[derive(Debug, Clone)]
pub struct ToolIndex {
    /// Each tool's name and its terms' counts, and its length in terms.
    docs: Vec<(String, HashMap<String, u32>, usize)>,
    /// How many tools hold each term.
    frequency: HashMap<String, u32>,
    average: f64,
}

impl ToolIndex {
    /// Indexes `tools` (a name's parts count twice: `get_weather` is "get weather").
    pub fn new(tools: &[ToolSpec]) -> ToolIndex {
        let mut frequency: HashMap<String, u32> = HashMap::new();
        let mut docs = Vec::with_capacity(tools.len());
        let mut total = 0usize;
        for tool in tools {
            let mut terms: HashMap<String, u32> = HashMap::new();
            let mut len = 0;
            for term in terms_of(&tool.name)
                .into_iter()
                .chain(terms_of(&tool.name))
                .chain(terms_of(&tool.description))
            {
                *terms.entry(term).or_default() += 1;
                len += 1;
            }
            for term in terms.keys() {
                *frequency.entry(term.clone()).or_default() += 1;
            }
            total += len;
            docs.push((tool.name.clone(), terms, len));
        }
        let average = if docs.is_empty() {
            1.0
        } else {
            (total as f64 / docs.len() as f64).max(1.0)
        };
        ToolIndex {
            docs,
            frequency,
            average,
        }
    }

    /// The names of the tools that best match `query`, best first (ties in index order), at
    /// most `limit`; tools that share no term with it are left out.
    pub fn search(&self, query: &str, limit: usize) -> Vec<String> {
        let query = &query[..floor_boundary(query, MAX_QUERY_BYTES)];
        let mut terms = terms_of(query);
        terms.sort();
        terms.dedup();
        terms.truncate(MAX_QUERY_TERMS);
        let n = self.docs.len() as f64;
        let mut scored: Vec<(f64, usize)> = self
            .docs
            .iter()
            .enumerate()
            .filter_map(|(i, (_, counts, len))| {
                let mut score = 0.0;
                for term in &terms {
                    let Some(&tf) = counts.get(term) else {
                        continue;
                    };
                    let df = f64::from(self.frequency.get(term).copied().unwrap_or(0));
                    let idf = ((n - df + 0.5) / (df + 0.5) + 1.0).ln();
                    let tf = f64::from(tf);
                    score += idf * tf * (K1 + 1.0)
                        / (tf + K1 * (1.0 - B + B * (*len as f64) / self.average));
                }
                (score > 0.0).then_some((score, i))
            })
            .collect();
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        scored
            .into_iter()
            .take(limit)
            .map(|(_, i)| self.docs[i].0.clone())
            .collect()
    }
}

fn floor_boundary(text: &str, max: usize) -> usize {
    if text.len() <= max {
        return text.len();
    }
    (0..=max)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0)
}

/// Lower-case alphanumeric terms; `camelCase`, `snake_case` and `kebab-case` split into their
/// words; a plural `s` dropped from words of four letters or more.
fn terms_of(text: &str) -> Vec<String> {
    let mut terms = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    let flush = |word: &mut String, terms: &mut Vec<String>| {
        if !word.is_empty() {
            let mut term = std::mem::take(word);
            if term.len() >= 4 && term.ends_with('s') && !term.ends_with("ss") {
                term.pop();
            }
            terms.push(term);
        }
    };
    for c in text.chars() {
        if c.is_alphanumeric() {
            if c.is_uppercase() && previous_lower {
                flush(&mut word, &mut terms);
            }
            previous_lower = c.is_lowercase() || c.is_ascii_digit();
            word.extend(c.to_lowercase());
        } else {
            previous_lower = false;
            flush(&mut word, &mut terms);
        }
    }
    flush(&mut word, &mut terms);
    terms
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
        }
    }

    fn many(n: usize) -> Vec<ToolSpec> {
        (0..n)
            .map(|i| spec(&format!("tool_{i}"), &format!("Does thing number {i}")))
            .collect()
    }

    #[test]
    fn terms_split_names_and_fold_plurals() {
        assert_eq!(terms_of("getWeather_now"), ["get", "weather", "now"]);
        assert_eq!(terms_of("Sends emails, fast!"), ["send", "email", "fast"]);
        assert_eq!(terms_of("class"), ["class"]);
    }

    #[test]
    fn search_ranks_by_bm25_and_leaves_out_what_shares_nothing() {
        let tools = [
            spec("get_weather", "Current weather for a city"),
            spec("get_forecast", "Weather forecast for the next days"),
            spec("send_email", "Sends an email"),
        ];
        let index = ToolIndex::new(&tools);
        assert_eq!(index.search("forecast", 5), ["get_forecast"]);
        // Both mention weather; the name counts twice, so get_weather is first.
        assert_eq!(index.search("weather", 5), ["get_weather", "get_forecast"]);
        assert_eq!(index.search("email", 1), ["send_email"]);
        assert!(index.search("database", 5).is_empty());
        assert!(index.search("", 5).is_empty());
        assert!(ToolIndex::new(&[]).search("x", 5).is_empty());
    }

    #[test]
    fn over_the_threshold_a_request_carries_search_and_what_was_loaded() {
        let search = ToolSearch::new().threshold(3);
        assert_eq!(search.select(many(3), &[], None).len(), 3);
        let tools = many(10);
        let first = search.select(tools.clone(), &[], Some("tool_7"));
        let names: Vec<&str> = first.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [SEARCH_TOOL, "tool_7"]);

        // The history: a search that found tool_2 and tool_5, and a call of tool_9.
        let (found, error) = search.answer(&tools, &json!({"query": "number 2"}));
        assert!(!error);
        assert!(found.starts_with(RESULT_HEADER), "{found}");
        assert!(found.contains("\ntool_2: Does thing number 2"), "{found}");
        let history = vec![
            Message::user("go"),
            Message {
                role: crate::message::Role::Assistant,
                content: vec![
                    ContentBlock::ToolUse {
                        id: "s1".into(),
                        name: SEARCH_TOOL.into(),
                        input: json!({}),
                    },
                    ContentBlock::ToolUse {
                        id: "c1".into(),
                        name: "tool_9".into(),
                        input: json!({}),
                    },
                ],
            },
            Message {
                role: crate::message::Role::User,
                content: vec![
                    ContentBlock::tool_result(
                        "s1",
                        format!("{RESULT_HEADER}\ntool_2: a\ntool_5: b"),
                        false,
                    ),
                    ContentBlock::tool_result(
                        "c1",
                        format!("{RESULT_HEADER}\ntool_1: not a search"),
                        false,
                    ),
                ],
            },
        ];
        let next = search.select(tools, &history, None);
        let names: Vec<&str> = next.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [SEARCH_TOOL, "tool_2", "tool_5", "tool_9"]);
    }

    #[test]
    fn functions_an_openai_hosted_search_loaded_count_as_found() {
        let search = ToolSearch::new().threshold(3).hosted(true);
        let output = |tools: Value| {
            ContentBlock::Other(json!({"type": "tool_search_output", "id": "tso_1",
                                       "execution": "server", "status": "completed",
                                       "tools": tools}))
        };
        let history = vec![
            Message::user("go"),
            Message {
                role: crate::message::Role::Assistant,
                content: vec![
                    output(json!([{"type": "function", "name": "tool_4"},
                                  {"type": "namespace", "name": "ns",
                                   "tools": [{"type": "function", "name": "tool_6"},
                                             {"type": "namespace", "name": "inner", "tools":
                                              [{"type": "function", "name": "tool_9"}]}]},
                                  {"type": "mcp", "name": "mcp",
                                   "tools": [{"type": "function", "name": "tool_5"}]},
                                  {"type": "mcp", "name": "tool_7"}, 3])),
                    output(json!("not a list")),
                    ContentBlock::Other(json!({"type": "tool_search_call",
                                               "tools": [{"type": "function", "name": "tool_8"}]})),
                ],
            },
        ];
        let (carried, deferred) = search.split(many(10), &history, None);
        let names: Vec<&str> = carried.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, [SEARCH_TOOL, "tool_4", "tool_6"]);
        assert_eq!(deferred.len(), 8);
    }

    #[test]
    fn bad_search_input_is_an_error_result() {
        let (text, error) = ToolSearch::new().answer(&many(3), &json!({"q": 1}));
        assert!(error);
        assert!(text.contains("\"query\""));
        let (text, error) = ToolSearch::new().answer(&many(3), &json!({"query": "zzz"}));
        assert!(!error);
        assert!(text.starts_with("No tool matches"));
    }

    proptest! {
        /// Over the threshold, every tool is either carried or deferred (never both, never
        /// lost), in the agent's order, behind the search tool; the ones the history called and
        /// the kept one are carried. At or under it, every tool is carried as it is.
        #[test]
        fn a_split_keeps_every_tool_once(
            n in 0usize..40,
            threshold in 0usize..20,
            called in prop::collection::btree_set(0usize..40, 0..6),
            keep in prop::option::of(0usize..40),
        ) {
            let tools = many(n);
            let history: Vec<Message> = called
                .iter()
                .map(|i| Message {
                    role: crate::message::Role::Assistant,
                    content: vec![ContentBlock::ToolUse {
                        id: format!("c{i}"),
                        name: format!("tool_{i}"),
                        input: json!({}),
                    }],
                })
                .collect();
            let keep_name = keep.map(|k| format!("tool_{k}"));
            let search = ToolSearch::new().threshold(threshold);
            let (carried, deferred) = search.split(tools.clone(), &history, keep_name.as_deref());
            if n <= threshold {
                prop_assert_eq!(&carried, &tools);
                prop_assert!(deferred.is_empty());
            } else {
                prop_assert_eq!(carried[0].name.as_str(), SEARCH_TOOL);
                let mut seen: Vec<&str> = carried[1..]
                    .iter()
                    .chain(deferred.iter())
                    .map(|t| t.name.as_str())
                    .collect();
                prop_assert_eq!(seen.len(), n);
                seen.sort_by_key(|name| name[5..].parse::<usize>().unwrap());
                let all: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                prop_assert_eq!(seen, all);
                for t in &carried[1..] {
                    let i: usize = t.name[5..].parse().unwrap();
                    prop_assert!(called.contains(&i) || keep == Some(i));
                }
                for t in &deferred {
                    let i: usize = t.name[5..].parse().unwrap();
                    prop_assert!(!called.contains(&i) && keep != Some(i));
                }
            }
        }

        /// Any query: at most `limit` results, each a tool's name, no repeats, and a tool whose
        /// name is the query exactly is among them.
        #[test]
        fn results_are_bounded_tools(query in "\\PC{0,200}", limit in 0usize..8, pick in 0usize..40) {
            let tools = many(40);
            let index = ToolIndex::new(&tools);
            let found = index.search(&query, limit);
            prop_assert!(found.len() <= limit);
            let unique: BTreeSet<&String> = found.iter().collect();
            prop_assert_eq!(unique.len(), found.len());
            prop_assert!(found.iter().all(|n| tools.iter().any(|t| &t.name == n)));
            let name = format!("tool_{pick}");
            let exact = index.search(&name, 1);
            prop_assert_eq!(exact, vec![name]);
        }
    }
}
