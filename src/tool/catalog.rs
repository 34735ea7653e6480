//! [`ToolCatalog`]: what the agent's machine knows of the tools, as plain data.

use std::collections::HashMap;

use crate::message::ToolSpec;

/// The tools as the machine sees them: each one's spec (name, description, input schema)
/// and whether it is read-only. Plain data, no tool code: the machine decides with it (which
/// calls may start early, which tools a request lists, whether a named tool exists), and the
/// driver runs the calls. [`ToolRegistry::catalog`](crate::ToolRegistry::catalog) gives the
/// catalog of a registry.
///
/// ```
/// use agent_loop::tool::{ToolCatalog, ToolSpec};
/// use serde_json::json;
///
/// let catalog = ToolCatalog::new().tool(
///     ToolSpec {
///         name: "read_file".into(),
///         description: "Reads a file.".into(),
///         input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
///     },
///     true,
/// );
/// assert!(catalog.is_read_only("read_file"));
/// assert!(!catalog.contains("write_file"));
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolCatalog {
    specs: Vec<ToolSpec>,
    /// Each name's position in `specs`, whether the tool is read-only and whether it is
    /// deferred.
    by_name: HashMap<String, (usize, bool, bool)>,
}

impl ToolCatalog {
    /// An empty catalog.
    pub fn new() -> Self {
        ToolCatalog::default()
    }

    /// Adds a tool (a later one of the same name replaces it).
    pub fn tool(self, spec: ToolSpec, read_only: bool) -> Self {
        self.add(spec, read_only, false)
    }

    /// Adds a [deferred](crate::Tool::deferred) tool: its results come from outside, and a
    /// run with calls of it pauses for them (a later tool of the same name replaces it).
    pub fn deferred_tool(self, spec: ToolSpec) -> Self {
        self.add(spec, false, true)
    }

    fn add(mut self, spec: ToolSpec, read_only: bool, deferred: bool) -> Self {
        match self.by_name.get(&spec.name) {
            Some(&(i, _, _)) => {
                self.by_name
                    .insert(spec.name.clone(), (i, read_only, deferred));
                self.specs[i] = spec;
            }
            None => {
                self.by_name
                    .insert(spec.name.clone(), (self.specs.len(), read_only, deferred));
                self.specs.push(spec);
            }
        }
        self
    }

    /// Whether a tool of this name is in the catalog.
    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(name)
    }

    /// Whether the named tool is in the catalog and read-only.
    pub fn is_read_only(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|&(_, read_only, _)| read_only)
    }

    /// Whether the named tool is in the catalog and [deferred](crate::Tool::deferred).
    pub fn is_deferred(&self, name: &str) -> bool {
        self.by_name
            .get(name)
            .is_some_and(|&(_, _, deferred)| deferred)
    }

    /// The specs, in the order the tools were added.
    pub fn specs(&self) -> &[ToolSpec] {
        &self.specs
    }

    /// The number of tools.
    pub fn len(&self) -> usize {
        self.specs.len()
    }

    /// Whether the catalog is empty.
    pub fn is_empty(&self) -> bool {
        self.specs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(name: &str, description: &str) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: json!({"type": "object"}),
        }
    }

    #[test]
    fn a_tool_added_again_replaces_the_first_in_its_place() {
        let catalog = ToolCatalog::new()
            .tool(spec("a", "first"), true)
            .tool(spec("b", "other"), false)
            .tool(spec("a", "second"), false);
        assert_eq!(catalog.len(), 2);
        assert_eq!(catalog.specs()[0].description, "second");
        assert_eq!(catalog.specs()[1].name, "b");
        assert!(!catalog.is_read_only("a"), "the later flag wins");
        assert!(catalog.contains("b") && !catalog.contains("c"));
        assert!(!catalog.is_empty() && ToolCatalog::new().is_empty());
    }
}
