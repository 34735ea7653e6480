//! [`UserInput`]: what a user says to start a run, text with images and documents.

use crate::media::{Document, Image};
use crate::message::{ContentBlock, Message, Role};

/// What a user says to start a run: text, and optionally images and documents.
///
/// [`Agent::run`](crate::Agent::run) takes anything that converts into it, so plain text
/// (`&str`, `String`) works as it is.
///
/// ```
/// use agent_loop::{UserInput};
/// use agent_loop::media::Image;
///
/// # let png = {
/// #     let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
/// #     b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1, 8, 6, 0, 0, 0, 0, 0, 0, 0]);
/// #     b
/// # };
/// let input = UserInput::text("What is in this picture?").image(Image::png(&png)?);
/// assert_eq!(input.into_message().content.len(), 2);
/// # Ok::<(), agent_loop::media::MediaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default)]
pub struct UserInput {
    content: Vec<ContentBlock>,
}

impl UserInput {
    /// Input with this text.
    pub fn text(text: impl Into<String>) -> Self {
        UserInput {
            content: vec![ContentBlock::text(text)],
        }
    }

    /// Adds an image (after what is there).
    pub fn image(mut self, image: Image) -> Self {
        self.content.push(image.into());
        self
    }

    /// Adds a document (after what is there).
    pub fn document(mut self, document: Document) -> Self {
        self.content.push(document.into());
        self
    }

    /// Adds more text (after what is there).
    pub fn and_text(mut self, text: impl Into<String>) -> Self {
        self.content.push(ContentBlock::text(text));
        self
    }

    /// Adds any content block (text, image, document).
    pub fn block(mut self, block: ContentBlock) -> Self {
        self.content.push(block);
        self
    }

    /// The user message it makes.
    pub fn into_message(self) -> Message {
        Message {
            role: Role::User,
            content: if self.content.is_empty() {
                vec![ContentBlock::text(String::new())]
            } else {
                self.content
            },
        }
    }
}

impl From<&str> for UserInput {
    fn from(text: &str) -> Self {
        UserInput::text(text)
    }
}

impl From<String> for UserInput {
    fn from(text: String) -> Self {
        UserInput::text(text)
    }
}

impl From<&String> for UserInput {
    fn from(text: &String) -> Self {
        UserInput::text(text.clone())
    }
}

impl From<Image> for UserInput {
    fn from(image: Image) -> Self {
        UserInput::default().image(image)
    }
}

impl From<Vec<ContentBlock>> for UserInput {
    fn from(content: Vec<ContentBlock>) -> Self {
        UserInput { content }
    }
}
