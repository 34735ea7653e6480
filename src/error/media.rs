//! [`MediaError`]: why an image or document was refused.

/// Why an image or document was refused.
#[non_exhaustive]
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaError {
    /// The media type is not one the providers take.
    #[error(
        "unsupported media type `{0}`: images must be image/png, image/jpeg, image/gif or \
         image/webp, documents application/pdf"
    )]
    UnsupportedMediaType(String),
    /// The bytes are not the format they were said to be.
    #[error("the bytes are not {claimed}: {}", found.map_or_else(|| "their header is not a known image format".to_owned(), |f| format!("their header says {f}")))]
    Mismatch {
        /// The media type given.
        claimed: String,
        /// The format the header shows, if any.
        found: Option<&'static str>,
    },
    /// The header is too damaged to read the image's size from.
    #[error("the {0} header is truncated or damaged: its width and height cannot be read")]
    Unreadable(&'static str),
    /// No bytes.
    #[error("the file is empty")]
    Empty,
    /// Larger than a limit.
    #[error("{what} is {size} bytes, over the limit of {limit}")]
    TooLarge {
        /// What was measured.
        what: &'static str,
        /// Its size in bytes.
        size: usize,
        /// The limit in bytes.
        limit: usize,
    },
    /// Base64 text that does not decode.
    #[error("the data is not valid base64: {0}")]
    InvalidBase64(String),
    /// A URL that is not `http://`, `https://` or a base64 `data:` URL.
    #[error("`{0}` is not an http(s) URL or a base64 data: URL")]
    InvalidUrl(String),
}
