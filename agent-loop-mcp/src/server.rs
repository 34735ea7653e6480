//! [`McpServer`]: how to reach an MCP server (a child process or streamable HTTP), and which
//! of its tools to take. Plain settings; connecting is `mod.rs`'s, the live session
//! `session.rs`'s.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_loop::tool::Concurrency;

use crate::elicit::Elicitation;
use crate::sampling::Sampling;

/// Filters tools by their name on the server.
pub(crate) type Filter = Arc<dyn Fn(&str) -> bool + Send + Sync>;

#[derive(Clone)]
pub(crate) enum Transport {
    Stdio {
        command: String,
        args: Vec<String>,
        env: Vec<(String, String)>,
        cwd: Option<PathBuf>,
    },
    Http {
        url: String,
        headers: Vec<(String, String)>,
    },
}

/// How to reach an MCP server, and which of its tools to take; [`connect`](Self::connect)
/// starts it.
///
/// Two transports: a child process speaking MCP over its stdin and stdout
/// ([`stdio`](Self::stdio)), and streamable HTTP ([`http`](Self::http)). The child's stderr
/// goes to `tracing` (target `agent_loop_mcp::stderr`, level INFO), never to the terminal.
#[derive(Clone)]
pub struct McpServer {
    pub(crate) name: String,
    pub(crate) transport: Transport,
    pub(crate) prefix: String,
    pub(crate) filter: Option<Filter>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) concurrency: Concurrency,
    pub(crate) max_reconnects: u32,
    pub(crate) max_message_bytes: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) elicitation: Option<Elicitation>,
    pub(crate) sampling: Option<Sampling>,
}

impl McpServer {
    pub(crate) fn new(name: impl Into<String>, transport: Transport) -> Self {
        McpServer {
            name: name.into(),
            transport,
            prefix: String::new(),
            filter: None,
            timeout: None,
            concurrency: Concurrency::Shared,
            max_reconnects: 3,
            max_message_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(30),
            elicitation: None,
            sampling: None,
        }
    }

    /// A server started as a child process, speaking MCP over its stdin and stdout. `name`
    /// names the server in errors and logs.
    pub fn stdio(name: impl Into<String>, command: impl Into<String>) -> Self {
        McpServer::new(
            name,
            Transport::Stdio {
                command: command.into(),
                args: Vec::new(),
                env: Vec::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over streamable HTTP at `url` (its MCP endpoint, such as
    /// `http://127.0.0.1:3001/mcp`).
    ///
    /// The HTTP client (rmcp's, on reqwest 0.13 with rustls) needs a process-wide rustls
    /// crypto provider: when the host has installed none, connecting installs ring's.
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServer::new(
            name,
            Transport::Http {
                url: url.into(),
                headers: Vec::new(),
            },
        )
    }

    /// Adds a command-line argument (stdio servers; ignored for HTTP).
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.push(arg.into());
        }
        self
    }

    /// Adds command-line arguments (stdio servers; ignored for HTTP).
    pub fn args<I, S>(mut self, new: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        if let Transport::Stdio { args, .. } = &mut self.transport {
            args.extend(new.into_iter().map(Into::into));
        }
        self
    }

    /// Sets an environment variable of the child process, on top of this process's
    /// environment (stdio servers; ignored for HTTP). Values never appear in `Debug`.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.push((key.into(), value.into()));
        }
        self
    }

    /// The working directory of the child process (stdio servers; ignored for HTTP).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Adds a header to every HTTP request, such as `Authorization` (HTTP servers; ignored for
    /// stdio). Values never appear in `Debug`.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Http { headers, .. } = &mut self.transport {
            headers.push((key.into(), value.into()));
        }
        self
    }

    /// Puts `prefix` before every tool name the model sees (`fs_` makes `read_file`
    /// `fs_read_file`), to keep two servers' tools apart. Characters the providers do not
    /// allow in names (anything but letters, digits, `_` and `-`) become `_`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Takes only the tools with these names (as the server names them).
    pub fn only<I, S>(self, names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names.into_iter().map(Into::into).collect();
        self.filter(move |name| names.iter().any(|n| n == name))
    }

    /// Takes only the tools whose name (as the server names it) passes `keep`.
    pub fn filter(mut self, keep: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        self.filter = Some(Arc::new(keep));
        self
    }

    /// The longest one call of this server's tools may run (default: the registry's).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    /// How calls of this server's tools overlap other calls (default
    /// [`Concurrency::Shared`]: side by side); [`Concurrency::Exclusive`] for a server that
    /// cannot take concurrent calls.
    pub fn concurrency(mut self, concurrency: Concurrency) -> Self {
        self.concurrency = concurrency;
        self
    }

    /// How many times in a row starting the server again may fail before its tools answer
    /// every call with an error without trying (default 3). A session that dies is restarted
    /// on the next call; a successful start resets the count.
    pub fn max_reconnects(mut self, times: u32) -> Self {
        self.max_reconnects = times;
        self
    }

    /// The largest message the server may send (default 16 MiB). A larger one closes the
    /// connection, and the call waiting for it gets an error saying so.
    pub fn max_message_bytes(mut self, bytes: usize) -> Self {
        self.max_message_bytes = bytes.max(1);
        self
    }

    /// How long starting the server and the MCP handshake may take (default 30 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Answers the server's questions (`elicitation/create`) through the agent's run: a
    /// question asked during a tool call pauses the run, and the host's answer, given when it
    /// resumes the run, goes to the server (see [`Elicitation`]). Without it the client does
    /// not declare the capability and declines every question.
    ///
    /// ```
    /// use agent_loop_mcp::{Elicitation, McpServer};
    ///
    /// let server = McpServer::http("bookings", "http://127.0.0.1:3001/mcp")
    ///     .elicitation(Elicitation::new());
    /// # let _ = server;
    /// ```
    pub fn elicitation(mut self, elicitation: Elicitation) -> Self {
        self.elicitation = Some(elicitation);
        self
    }

    /// Serves the server's sampling requests (`sampling/createMessage`) with a model the host
    /// chose, under the budget of the run whose tool call they come in (see [`Sampling`]).
    /// Without it the client does not declare the capability and refuses every request.
    ///
    /// ```
    /// use agent_loop::testing::ScriptedClient;
    /// use agent_loop_mcp::{McpServer, Sampling};
    ///
    /// let model = ScriptedClient::new([]); // a real host: AnthropicClient::from_env()?
    /// let server = McpServer::stdio("docs", "docs-server").sampling(Sampling::new(model));
    /// # let _ = server;
    /// ```
    pub fn sampling(mut self, sampling: Sampling) -> Self {
        self.sampling = Some(sampling);
        self
    }
}

impl fmt::Debug for McpServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("McpServer");
        d.field("name", &self.name);
        match &self.transport {
            Transport::Stdio {
                command,
                args,
                env,
                cwd,
            } => {
                let env: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
                d.field("command", command)
                    .field("args", args)
                    .field("env", &env)
                    .field("cwd", cwd);
            }
            Transport::Http { url, headers } => {
                let headers: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
                d.field("url", url).field("headers", &headers);
            }
        }
        d.field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .field("concurrency", &self.concurrency)
            .field("elicitation", &self.elicitation)
            .field("sampling", &self.sampling)
            .finish_non_exhaustive()
    }
}
