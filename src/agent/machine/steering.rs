//! What the host typed into a live run ([`Input::Steer`](super::Input::Steer)): kept in order
//! until the next safe point (a turn boundary: every call of the last response answered, the
//! next model call not made), then added to the history as the user's words; what the run
//! never reached is handed back in its outcome.

use std::collections::VecDeque;

use crate::context::ContextManager;
use crate::input::UserInput;

/// The steering inputs not delivered yet, oldest first.
#[derive(Debug, Default)]
pub(super) struct Steering {
    queued: VecDeque<UserInput>,
}

impl Steering {
    /// Queues `input` after the others.
    pub(super) fn push(&mut self, input: UserInput) {
        self.queued.push_back(input);
    }

    /// Whether anything waits to be delivered.
    pub(super) fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }

    /// Adds every queued input to `context` as the user's words, in order (a trailing user
    /// message, such as the last batch's results, takes them in); returns them, for their
    /// events.
    ///
    /// Only at a safe point: the caller checks that no call waits for its result.
    pub(super) fn deliver(&mut self, context: &mut ContextManager) -> Vec<UserInput> {
        let delivered: Vec<UserInput> = self.queued.drain(..).collect();
        for input in &delivered {
            context.push(input.clone().into_message());
        }
        delivered
    }

    /// What was never delivered, in order: the run ended before its next safe point.
    pub(super) fn take_undelivered(&mut self) -> Vec<UserInput> {
        self.queued.drain(..).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::ContextConfig;
    use crate::message::{ContentBlock, Message, Role};

    fn text(s: &str) -> UserInput {
        UserInput::from(s)
    }

    #[test]
    fn delivers_in_order_as_one_user_message() {
        let mut context = ContextManager::new(ContextConfig::default());
        context.push(Message::user("go"));
        context.push(Message::assistant("working"));
        let mut steering = Steering::default();
        steering.push(text("first"));
        steering.push(text("second"));
        assert!(!steering.is_empty());
        let delivered = steering.deliver(&mut context);
        assert_eq!(delivered, vec![text("first"), text("second")]);
        assert!(steering.is_empty());
        let last = context.messages().last().unwrap();
        assert_eq!(last.role, Role::User);
        assert_eq!(
            last.content,
            vec![ContentBlock::text("first"), ContentBlock::text("second")]
        );
        // Delivered once: nothing is left to hand back.
        assert!(steering.take_undelivered().is_empty());
        assert!(steering.deliver(&mut context).is_empty());
    }

    #[test]
    fn hands_back_what_was_never_delivered_in_order() {
        let mut steering = Steering::default();
        steering.push(text("a"));
        steering.push(text("b"));
        assert_eq!(steering.take_undelivered(), vec![text("a"), text("b")]);
        assert!(steering.is_empty());
    }
}
