//! Each provider's documented limits on images and documents, checked by its encoder before
//! a request is sent (a conversation can be built or restored from plain blocks, past
//! [`Image`](crate::media::Image)'s own checks).

use crate::media::{source_dimensions, ImageFormat, MAX_MEDIA_BYTES};
use crate::message::MediaSource;

/// Anthropic's limit on one image's base64 data: 5 MiB.
pub(crate) const ANTHROPIC_MAX_IMAGE_BASE64: usize = 5 * 1024 * 1024;
/// Anthropic's limit on an image's width and height, in pixels.
pub(crate) const ANTHROPIC_MAX_IMAGE_SIDE: u32 = 8000;
/// OpenAI's limit on one image's bytes: 20 MiB (as base64: 4/3 of that).
pub(crate) const OPENAI_MAX_IMAGE_BASE64: usize = 20 * 1024 * 1024 / 3 * 4;
/// The limit on one document's base64 data (both providers: 32 MB requests).
pub(crate) const MAX_DOCUMENT_BASE64: usize = MAX_MEDIA_BYTES / 3 * 4 + 4;

/// Whose documented media limits a request is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Provider {
    /// Anthropic Messages: the four image types, 5 MB of base64, 8000 px a side.
    Anthropic,
    /// OpenAI (Chat Completions and Responses): the four image types, 20 MB.
    OpenAi,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "Anthropic",
            Provider::OpenAi => "OpenAI",
        }
    }
}

fn refused(message: String) -> crate::error::LlmError {
    crate::error::LlmError::InvalidRequest { message }
}

/// Checks an image source against `provider`'s documented limits before it is sent (a
/// conversation can be built or restored from plain blocks, past [`Image`]'s own checks).
pub(crate) fn check_image(
    source: &MediaSource,
    provider: Provider,
) -> Result<(), crate::error::LlmError> {
    let MediaSource::Base64 { media_type, data } = source else {
        return Ok(());
    };
    let name = provider.name();
    if ImageFormat::from_media_type(media_type).is_none() {
        return Err(refused(format!(
            "{name} does not take images of type `{media_type}` (only image/png, image/jpeg, \
             image/gif and image/webp)"
        )));
    }
    let (limit, limit_text) = match provider {
        Provider::Anthropic => (ANTHROPIC_MAX_IMAGE_BASE64, "5 MB"),
        Provider::OpenAi => (OPENAI_MAX_IMAGE_BASE64, "20 MB"),
    };
    if data.len() > limit {
        return Err(refused(format!(
            "an image is {} bytes of base64, over {name}'s limit of {limit_text}; send it smaller",
            data.len()
        )));
    }
    if provider == Provider::Anthropic {
        if let Some((w, h)) = source_dimensions(source) {
            if w > ANTHROPIC_MAX_IMAGE_SIDE || h > ANTHROPIC_MAX_IMAGE_SIDE {
                return Err(refused(format!(
                    "an image is {w}×{h} px, over Anthropic's limit of 8000 px a side"
                )));
            }
        }
    }
    Ok(())
}

/// Checks a document's bytes: a PDF within the 32 MB request limit both providers share. URL
/// sources pass (each encoder decides whether its format can carry one).
pub(crate) fn check_document(
    source: &MediaSource,
    provider: Provider,
) -> Result<(), crate::error::LlmError> {
    let MediaSource::Base64 { media_type, data } = source else {
        return Ok(());
    };
    if media_type != "application/pdf" {
        return Err(refused(format!(
            "{} takes documents of type application/pdf, not `{media_type}`",
            provider.name()
        )));
    }
    if data.len() > MAX_DOCUMENT_BASE64 {
        return Err(refused(format!(
            "a document is {} bytes of base64, over the 32 MB request limit",
            data.len()
        )));
    }
    Ok(())
}
