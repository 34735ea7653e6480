//! The one-shot calls: run the whole loop and return its outcome, its text or a typed answer.

use futures::StreamExt;

use crate::error::LlmError;
use crate::input::UserInput;

use crate::agent::agent::Agent;
use crate::agent::events::{AgentEvent, RunError, RunOutcome, Termination};
use crate::agent::machine::output::{RunOptions, StructuredOutput};

impl Agent {
    /// Runs the whole loop on `input` and returns how it ended; the events are dropped.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::{Agent};
    /// use agent_loop::agent::RunOptions;
    ///
    /// let client = ScriptedClient::new([ScriptedResponse::text("Paris.")]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let outcome = agent.run_to_end("Capital of France?", RunOptions::new()).await;
    /// assert_eq!(outcome.final_text, "Paris.");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn run_to_end(
        &mut self,
        input: impl Into<UserInput>,
        options: RunOptions,
    ) -> RunOutcome {
        self.run_to_end_with(input, options, |_| {}).await
    }

    /// [`run_to_end`](Self::run_to_end), handing each event to `on_event` as it comes (to
    /// print the answer as it streams, log tool calls …).
    pub async fn run_to_end_with(
        &mut self,
        input: impl Into<UserInput>,
        options: RunOptions,
        mut on_event: impl FnMut(&AgentEvent) + Send,
    ) -> RunOutcome {
        let mut events = std::pin::pin!(self.run_with(input, options));
        let mut outcome = None;
        while let Some(event) = events.next().await {
            on_event(&event);
            if let AgentEvent::Finished(done) = event {
                outcome = Some(done);
            }
        }
        // The stream always ends with `Finished`; this is only for a broken invariant.
        outcome.unwrap_or_else(|| {
            RunOutcome::new(Termination::Error(
                LlmError::incomplete("the run ended without an outcome").into(),
            ))
        })
    }

    /// Runs the whole loop on `input` and returns the final answer's text; a run that ends
    /// any other way is an error ([`RunError::Stopped`] with the outcome, or the error that
    /// ended it).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::Agent;
    ///
    /// let mut agent = Agent::builder(ScriptedClient::new([ScriptedResponse::text("4")])).build()?;
    /// assert_eq!(agent.prompt("2 + 2?").await?, "4");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prompt(&mut self, input: impl Into<UserInput>) -> Result<String, RunError> {
        self.run_to_end(input, RunOptions::default())
            .await
            .into_text()
    }

    /// Runs the whole loop on `input` asking for a typed answer (a structured answer through
    /// the `final_answer` tool, see [`StructuredOutput`]) and returns it.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use agent_loop::testing::{ScriptedClient, ScriptedResponse};
    /// use agent_loop::Agent;
    /// use serde_json::json;
    ///
    /// #[derive(serde::Deserialize, agent_loop::tool::schemars::JsonSchema)]
    /// #[schemars(crate = "agent_loop::tool::schemars")] // so that you need no schemars dependency
    /// struct City { name: String, country: String }
    ///
    /// let client = ScriptedClient::new([ScriptedResponse::tool_call(
    ///     "c1", "final_answer", json!({"name": "Paris", "country": "France"}),
    /// )]);
    /// let mut agent = Agent::builder(client).build()?;
    /// let city: City = agent.prompt_typed("Capital of France?").await?;
    /// assert_eq!(city.name, "Paris");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn prompt_typed<T>(&mut self, input: impl Into<UserInput>) -> Result<T, RunError>
    where
        T: serde::de::DeserializeOwned + schemars::JsonSchema + 'static,
    {
        let options = RunOptions::new().output(StructuredOutput::of::<T>()?);
        self.run_to_end(input, options).await.parse_output()
    }
}
