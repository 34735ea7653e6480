//! Images and documents: checked once, when they enter the conversation.
//!
//! [`Image`] and [`Document`] are the checked ways to put media into a conversation: an
//! [`Image`] knows its format (PNG, JPEG, GIF or WebP, read from the bytes' own header, never
//! trusted from the caller) and its width and height (read from the header without decoding
//! pixels). Bad input fails here, before anything is sent: an unknown media type, bytes that
//! are not the image they claim to be, an empty or oversized file, a URL that is not
//! `http(s)`.
//!
//! The provider limits (Anthropic: 5 MB per image, 8000 × 8000 px; OpenAI: 20 MB per image;
//! PDFs 32 MB) are checked again by each client's encoder (`provider/media_limits.rs`), since
//! a conversation can also be built or restored from plain [`ContentBlock`]s.
//!
//! Token estimates follow the providers' published rules ([`ImageTokenRule`]).

use std::fmt;

use base64::Engine as _;

pub use crate::error::MediaError;
use crate::message::ContentBlock;
pub use crate::message::MediaSource;

/// The largest image or document accepted at all, in bytes (before base64): 32 MiB, the
/// largest request Anthropic takes. Each provider's own, lower limits are checked when a
/// request is encoded.
pub const MAX_MEDIA_BYTES: usize = 32 * 1024 * 1024;

/// An image format the providers accept.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ImageFormat {
    /// `image/png`
    Png,
    /// `image/jpeg`
    Jpeg,
    /// `image/gif`
    Gif,
    /// `image/webp`
    Webp,
}

impl ImageFormat {
    /// The media (MIME) type.
    pub fn media_type(self) -> &'static str {
        match self {
            ImageFormat::Png => "image/png",
            ImageFormat::Jpeg => "image/jpeg",
            ImageFormat::Gif => "image/gif",
            ImageFormat::Webp => "image/webp",
        }
    }

    /// The format of a media type (`image/jpg` is taken as JPEG; case is ignored).
    pub fn from_media_type(media_type: &str) -> Option<ImageFormat> {
        let media_type = media_type.trim().to_ascii_lowercase();
        Some(match media_type.as_str() {
            "image/png" => ImageFormat::Png,
            "image/jpeg" | "image/jpg" => ImageFormat::Jpeg,
            "image/gif" => ImageFormat::Gif,
            "image/webp" => ImageFormat::Webp,
            _ => return None,
        })
    }

    /// The format the bytes' header says, if it is one of the four.
    pub fn sniff(bytes: &[u8]) -> Option<ImageFormat> {
        if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
            Some(ImageFormat::Png)
        } else if bytes.starts_with(&[0xFF, 0xD8, 0xFF]) {
            Some(ImageFormat::Jpeg)
        } else if bytes.starts_with(b"GIF87a") || bytes.starts_with(b"GIF89a") {
            Some(ImageFormat::Gif)
        } else if bytes.len() >= 12 && &bytes[..4] == b"RIFF" && &bytes[8..12] == b"WEBP" {
            Some(ImageFormat::Webp)
        } else {
            None
        }
    }
}

impl fmt::Display for ImageFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.media_type())
    }
}

/// A checked image: its source, format and (for bytes) its size in pixels.
///
/// ```
/// use agent_loop::media::{ImageFormat, Image};
///
/// // The smallest valid PNG header: 8-byte signature, IHDR of a 3×2 image.
/// let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
/// png.extend_from_slice(&3u32.to_be_bytes());
/// png.extend_from_slice(&2u32.to_be_bytes());
/// png.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
/// let image = Image::from_bytes("image/png", &png)?;
/// assert_eq!(image.format(), Some(ImageFormat::Png));
/// assert_eq!(image.dimensions(), Some((3, 2)));
///
/// // Bytes that are not what they claim to be are refused.
/// assert!(Image::from_bytes("image/jpeg", &png).is_err());
/// # Ok::<(), agent_loop::media::MediaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Image {
    source: MediaSource,
    format: Option<ImageFormat>,
    dimensions: Option<(u32, u32)>,
}

impl Image {
    /// An image from its bytes and media type. The bytes' header must be that format, and
    /// its width and height readable.
    pub fn from_bytes(media_type: &str, bytes: &[u8]) -> Result<Image, MediaError> {
        let claimed = ImageFormat::from_media_type(media_type)
            .ok_or_else(|| MediaError::UnsupportedMediaType(media_type.to_owned()))?;
        check_size("the image", bytes.len())?;
        let found = ImageFormat::sniff(bytes);
        if found != Some(claimed) {
            return Err(MediaError::Mismatch {
                claimed: claimed.media_type().to_owned(),
                found: found.map(ImageFormat::media_type),
            });
        }
        Self::checked(claimed, bytes)
    }

    /// An image from its bytes, its format read from the header.
    pub fn from_bytes_detect(bytes: &[u8]) -> Result<Image, MediaError> {
        check_size("the image", bytes.len())?;
        let format = ImageFormat::sniff(bytes).ok_or(MediaError::Mismatch {
            claimed: "an image".to_owned(),
            found: None,
        })?;
        Self::checked(format, bytes)
    }

    /// A PNG image from its bytes.
    pub fn png(bytes: &[u8]) -> Result<Image, MediaError> {
        Self::from_bytes("image/png", bytes)
    }

    /// A JPEG image from its bytes.
    pub fn jpeg(bytes: &[u8]) -> Result<Image, MediaError> {
        Self::from_bytes("image/jpeg", bytes)
    }

    /// An image from base64 text (standard alphabet) and its media type; the decoded bytes
    /// are checked as by [`from_bytes`](Self::from_bytes).
    pub fn from_base64(media_type: &str, data: &str) -> Result<Image, MediaError> {
        let bytes = decode_base64("the image", data)?;
        Self::from_bytes(media_type, &bytes)
    }

    /// An image the provider fetches from a URL: `https://` or `http://`; a base64 `data:`
    /// URL is decoded and checked like bytes.
    pub fn from_url(url: &str) -> Result<Image, MediaError> {
        if let Some(rest) = url.strip_prefix("data:") {
            let (media_type, data) = rest
                .split_once(";base64,")
                .ok_or_else(|| MediaError::InvalidUrl(shorten(url)))?;
            return Self::from_base64(media_type, data);
        }
        check_url(url)?;
        Ok(Image {
            source: MediaSource::Url {
                url: url.to_owned(),
            },
            format: None,
            dimensions: None,
        })
    }

    fn checked(format: ImageFormat, bytes: &[u8]) -> Result<Image, MediaError> {
        let dimensions =
            image_dimensions(format, bytes).ok_or(MediaError::Unreadable(format.media_type()))?;
        Ok(Image {
            source: MediaSource::Base64 {
                media_type: format.media_type().to_owned(),
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            format: Some(format),
            dimensions: Some(dimensions),
        })
    }

    /// Where the image is.
    pub fn source(&self) -> &MediaSource {
        &self.source
    }

    /// Its format, known for images given as bytes.
    pub fn format(&self) -> Option<ImageFormat> {
        self.format
    }

    /// Width and height in pixels, known for images given as bytes.
    pub fn dimensions(&self) -> Option<(u32, u32)> {
        self.dimensions
    }

    /// The image's source, for a [`ContentBlock::ToolResult`]'s `images`.
    pub fn into_source(self) -> MediaSource {
        self.source
    }
}

impl From<Image> for ContentBlock {
    fn from(image: Image) -> ContentBlock {
        ContentBlock::Image {
            source: image.source,
        }
    }
}

/// A checked PDF document, with an optional title.
///
/// ```
/// use agent_loop::media::Document;
///
/// let pdf = Document::pdf(b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF")?.title("Invoice");
/// assert_eq!(pdf.pages(), Some(1));
/// assert!(Document::pdf(b"not a pdf").is_err());
/// # Ok::<(), agent_loop::media::MediaError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    source: MediaSource,
    title: Option<String>,
    pages: Option<usize>,
}

impl Document {
    /// A PDF from its bytes (they must start with `%PDF-`).
    pub fn pdf(bytes: &[u8]) -> Result<Document, MediaError> {
        check_size("the document", bytes.len())?;
        if !bytes.starts_with(b"%PDF-") {
            return Err(MediaError::Mismatch {
                claimed: "application/pdf".to_owned(),
                found: ImageFormat::sniff(bytes).map(ImageFormat::media_type),
            });
        }
        Ok(Document {
            source: MediaSource::Base64 {
                media_type: "application/pdf".to_owned(),
                data: base64::engine::general_purpose::STANDARD.encode(bytes),
            },
            title: None,
            pages: Some(pdf_pages(bytes)),
        })
    }

    /// A PDF from base64 text (standard alphabet); the decoded bytes are checked as by
    /// [`pdf`](Self::pdf), and text too long for [`MAX_MEDIA_BYTES`] is refused before it is
    /// decoded.
    pub fn pdf_base64(data: &str) -> Result<Document, MediaError> {
        let bytes = decode_base64("the document", data)?;
        Self::pdf(&bytes)
    }

    /// A PDF the provider fetches from an `http(s)` URL; a base64 `data:` URL of a PDF is
    /// decoded and checked like bytes.
    pub fn from_url(url: &str) -> Result<Document, MediaError> {
        if let Some(rest) = url.strip_prefix("data:") {
            let (_, data) = rest
                .split_once(";base64,")
                .ok_or_else(|| MediaError::InvalidUrl(shorten(url)))?;
            return Self::pdf_base64(data);
        }
        check_url(url)?;
        Ok(Document {
            source: MediaSource::Url {
                url: url.to_owned(),
            },
            title: None,
            pages: None,
        })
    }

    /// Sets the title shown to the model.
    pub fn title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    /// The number of pages, counted from the PDF's page objects (known for bytes).
    pub fn pages(&self) -> Option<usize> {
        self.pages
    }

    /// Where the document is.
    pub fn source(&self) -> &MediaSource {
        &self.source
    }
}

impl From<Document> for ContentBlock {
    fn from(document: Document) -> ContentBlock {
        ContentBlock::Document {
            source: document.source,
            title: document.title,
        }
    }
}

fn check_size(what: &'static str, size: usize) -> Result<(), MediaError> {
    if size == 0 {
        return Err(MediaError::Empty);
    }
    if size > MAX_MEDIA_BYTES {
        return Err(MediaError::TooLarge {
            what,
            size,
            limit: MAX_MEDIA_BYTES,
        });
    }
    Ok(())
}

/// Decodes base64 text (standard alphabet), refusing text too long for [`MAX_MEDIA_BYTES`]
/// before decoding it.
fn decode_base64(what: &'static str, data: &str) -> Result<Vec<u8>, MediaError> {
    if data.len() > MAX_MEDIA_BYTES / 3 * 4 + 4 {
        return Err(MediaError::TooLarge {
            what,
            size: data.len() / 4 * 3,
            limit: MAX_MEDIA_BYTES,
        });
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| MediaError::InvalidBase64(e.to_string()))
}

fn check_url(url: &str) -> Result<(), MediaError> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let ok = (lower.starts_with("https://") && url.len() > 8)
        || (lower.starts_with("http://") && url.len() > 7);
    if !ok || url.chars().any(char::is_whitespace) {
        return Err(MediaError::InvalidUrl(shorten(url)));
    }
    Ok(())
}

fn shorten(s: &str) -> String {
    let mut end = s.len().min(80);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    if end < s.len() {
        format!("{}…", &s[..end])
    } else {
        s.to_owned()
    }
}

/// Width and height from an image's header, without decoding pixels; `None` when the header
/// is not that format or is cut short.
pub fn image_dimensions(format: ImageFormat, bytes: &[u8]) -> Option<(u32, u32)> {
    let dims = match format {
        ImageFormat::Png => {
            if bytes.get(12..16)? != b"IHDR" {
                return None;
            }
            (be32(bytes, 16)?, be32(bytes, 20)?)
        }
        ImageFormat::Gif => (u32::from(le16(bytes, 6)?), u32::from(le16(bytes, 8)?)),
        ImageFormat::Webp => webp_dimensions(bytes)?,
        ImageFormat::Jpeg => jpeg_dimensions(bytes)?,
    };
    (dims.0 > 0 && dims.1 > 0).then_some(dims)
}

fn be32(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

fn le24(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 3)?;
    Some(u32::from(s[0]) | u32::from(s[1]) << 8 | u32::from(s[2]) << 16)
}

fn webp_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    match b.get(12..16)? {
        // Lossy: a frame tag, the start code 9d 01 2a, then 14-bit width and height.
        b"VP8 " => {
            if b.get(23..26)? != [0x9d, 0x01, 0x2a] {
                return None;
            }
            Some((
                u32::from(le16(b, 26)? & 0x3fff),
                u32::from(le16(b, 28)? & 0x3fff),
            ))
        }
        // Lossless: the signature 0x2f, then 14 bits of width - 1 and of height - 1.
        b"VP8L" => {
            if *b.get(20)? != 0x2f {
                return None;
            }
            let bits = u32::from_le_bytes(b.get(21..25)?.try_into().ok()?);
            Some(((bits & 0x3fff) + 1, ((bits >> 14) & 0x3fff) + 1))
        }
        // Extended: 24-bit canvas width - 1 and height - 1.
        b"VP8X" => Some((le24(b, 24)? + 1, le24(b, 27)? + 1)),
        _ => None,
    }
}

/// Walks the JPEG segments to the first start-of-frame marker.
fn jpeg_dimensions(b: &[u8]) -> Option<(u32, u32)> {
    let mut i = 2;
    loop {
        // Markers may be padded with any number of 0xFF bytes.
        while *b.get(i)? == 0xFF && *b.get(i + 1)? == 0xFF {
            i += 1;
        }
        if *b.get(i)? != 0xFF {
            return None;
        }
        let marker = *b.get(i + 1)?;
        i += 2;
        match marker {
            // Standalone markers carry no length.
            0x01 | 0xD0..=0xD7 => continue,
            // End of image, or start of scan before any frame: no size to be had.
            0xD9 | 0xDA => return None,
            // SOF0..SOF15, except DHT (C4), JPG (C8) and DAC (CC).
            0xC0..=0xCF if !matches!(marker, 0xC4 | 0xC8 | 0xCC) => {
                let height = be16(b, i + 3)?;
                let width = be16(b, i + 5)?;
                return Some((u32::from(width), u32::from(height)));
            }
            _ => {
                let len = usize::from(be16(b, i)?);
                if len < 2 {
                    return None;
                }
                i = i.checked_add(len)?;
            }
        }
    }
}

/// The number of page objects (`/Type /Page`, not `/Pages`) in a PDF: at least 1.
fn pdf_pages(bytes: &[u8]) -> usize {
    let mut count = 0;
    for at in memchr::memmem::find_iter(bytes, b"/Type") {
        let rest = &bytes[at + 5..];
        let rest = &rest[rest
            .iter()
            .position(|c| !c.is_ascii_whitespace())
            .unwrap_or(rest.len())..];
        if rest.starts_with(b"/Page") && !rest.starts_with(b"/Pages") {
            count += 1;
        }
    }
    count.max(1)
}

/// How image tokens are estimated: each provider publishes its own rule.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum ImageTokenRule {
    /// Anthropic: about width × height / 750, after scaling the long edge to at most 1568 px;
    /// at most about 1,600 tokens.
    Anthropic,
    /// OpenAI (high detail): fit within 2048 × 2048, scale the short side down to 768, then
    /// 85 tokens plus 170 per 512-px tile.
    OpenAi,
    /// The larger of the two (the default when the model is not known): never under-counts.
    #[default]
    Larger,
}

/// Anthropic's cap on an image's tokens (the size it scales larger images down to).
const ANTHROPIC_IMAGE_CAP: u64 = 1_600;
/// OpenAI's most tokens for one high-detail image (8 tiles).
const OPENAI_IMAGE_CAP: u64 = 85 + 170 * 8;

impl ImageTokenRule {
    /// The estimated tokens of an image of this size; `None` (a URL, an unreadable header)
    /// counts as the rule's largest image.
    ///
    /// ```
    /// use agent_loop::media::ImageTokenRule;
    ///
    /// assert_eq!(ImageTokenRule::Anthropic.image_tokens(Some((1000, 1000))), 1334);
    /// assert_eq!(ImageTokenRule::OpenAi.image_tokens(Some((1024, 1024))), 765);
    /// assert_eq!(ImageTokenRule::OpenAi.image_tokens(Some((512, 512))), 255);
    /// ```
    pub fn image_tokens(self, dimensions: Option<(u32, u32)>) -> usize {
        let tokens = match self {
            ImageTokenRule::Anthropic => anthropic_tokens(dimensions),
            ImageTokenRule::OpenAi => openai_tokens(dimensions),
            ImageTokenRule::Larger => anthropic_tokens(dimensions).max(openai_tokens(dimensions)),
        };
        usize::try_from(tokens).unwrap_or(usize::MAX)
    }

    /// The rule for a model name: Claude models → Anthropic; GPT and o-series → OpenAI;
    /// anything else → [`Larger`](Self::Larger).
    pub fn for_model(name: &str) -> ImageTokenRule {
        let name = name.to_ascii_lowercase();
        let name = name.rsplit('/').next().unwrap_or(&name);
        if name.starts_with("claude") {
            ImageTokenRule::Anthropic
        } else if name.starts_with("gpt")
            || name.starts_with("chatgpt")
            || ["o1", "o3", "o4"].iter().any(|p| name.starts_with(p))
        {
            ImageTokenRule::OpenAi
        } else {
            ImageTokenRule::Larger
        }
    }
}

fn anthropic_tokens(dimensions: Option<(u32, u32)>) -> u64 {
    let Some((w, h)) = dimensions else {
        return ANTHROPIC_IMAGE_CAP;
    };
    let (w, h) = (f64::from(w), f64::from(h));
    let scale = (1568.0 / w.max(h)).min(1.0);
    let tokens = ((w * scale) * (h * scale) / 750.0).ceil();
    (tokens as u64).clamp(1, ANTHROPIC_IMAGE_CAP)
}

fn openai_tokens(dimensions: Option<(u32, u32)>) -> u64 {
    let Some((w, h)) = dimensions else {
        return OPENAI_IMAGE_CAP;
    };
    let (mut w, mut h) = (f64::from(w), f64::from(h));
    let fit = (2048.0 / w.max(h)).min(1.0);
    w *= fit;
    h *= fit;
    let short = (768.0 / w.min(h)).min(1.0);
    w *= short;
    h *= short;
    let tiles = (w / 512.0).ceil() * (h / 512.0).ceil();
    (85.0 + 170.0 * tiles) as u64
}

/// Tokens of a PDF page, as Anthropic describes it (its text plus an image of the page):
/// 1,500 to 3,000; the middle.
pub(crate) const DOCUMENT_PAGE_TOKENS: usize = 2_250;
/// Pages assumed for a document whose page count is not known (a URL).
pub(crate) const UNKNOWN_DOCUMENT_PAGES: usize = 10;

/// The size of an image source for token counting: read from the header of base64 data
/// (decoding only its first bytes), `None` for URLs.
pub(crate) fn source_dimensions(source: &MediaSource) -> Option<(u32, u32)> {
    let MediaSource::Base64 { media_type, data } = source else {
        return None;
    };
    let format = ImageFormat::from_media_type(media_type)?;
    // PNG, GIF and WebP keep their size in the first 30 bytes; JPEG after its metadata
    // segments, which are usually well within 64 KiB.
    let take = match format {
        ImageFormat::Jpeg => 96 * 1024,
        _ => 64,
    };
    let prefix = data.get(..take.min(data.len()) / 4 * 4)?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(prefix)
        .ok()?;
    image_dimensions(format, &bytes)
}

/// The page count of a base64 PDF source, `None` for URLs or bad data.
pub(crate) fn source_pages(source: &MediaSource) -> Option<usize> {
    let MediaSource::Base64 { data, .. } = source else {
        return None;
    };
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data)
        .ok()?;
    Some(pdf_pages(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn png(w: u32, h: u32) -> Vec<u8> {
        let mut b = b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR".to_vec();
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&[8, 6, 0, 0, 0, 0, 0, 0, 0]);
        b
    }

    fn jpeg(w: u16, h: u16) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8];
        // An APP0 segment first, then padding, then SOF2 (progressive).
        b.extend_from_slice(&[0xFF, 0xE0, 0x00, 0x06, b'J', b'F', b'I', b'F']);
        b.extend_from_slice(&[0xFF, 0xFF, 0xC2, 0x00, 0x11, 0x08]);
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        b
    }

    fn gif(w: u16, h: u16) -> Vec<u8> {
        let mut b = b"GIF89a".to_vec();
        b.extend_from_slice(&w.to_le_bytes());
        b.extend_from_slice(&h.to_le_bytes());
        b.extend_from_slice(&[0, 0, 0]);
        b
    }

    fn webp(chunk: &[u8; 4], payload: &[u8]) -> Vec<u8> {
        let mut b = b"RIFF\0\0\0\0WEBP".to_vec();
        b.extend_from_slice(chunk);
        b.extend_from_slice(&[0, 0, 0, 0]);
        b.extend_from_slice(payload);
        b
    }

    #[test]
    fn reads_the_size_of_every_format() {
        assert_eq!(
            Image::png(&png(640, 480)).unwrap().dimensions(),
            Some((640, 480))
        );
        assert_eq!(
            Image::jpeg(&jpeg(1920, 1080)).unwrap().dimensions(),
            Some((1920, 1080))
        );
        assert_eq!(
            Image::from_bytes("image/gif", &gif(10, 20))
                .unwrap()
                .dimensions(),
            Some((10, 20))
        );
        // VP8: frame tag (3 bytes), start code, 14-bit sizes (top bits are scale).
        let mut vp8 = vec![0, 0, 0, 0x9d, 0x01, 0x2a];
        vp8.extend_from_slice(&(300u16 | 0x4000).to_le_bytes());
        vp8.extend_from_slice(&200u16.to_le_bytes());
        assert_eq!(
            image_dimensions(ImageFormat::Webp, &webp(b"VP8 ", &vp8)),
            Some((300, 200))
        );
        // VP8L: signature, then (w-1) | (h-1) << 14.
        let bits: u32 = 99 | (49 << 14);
        let mut vp8l = vec![0x2f];
        vp8l.extend_from_slice(&bits.to_le_bytes());
        assert_eq!(
            image_dimensions(ImageFormat::Webp, &webp(b"VP8L", &vp8l)),
            Some((100, 50))
        );
        let vp8x = [0, 0, 0, 0, 0xFF, 0x0F, 0, 0x7F, 0x02, 0];
        assert_eq!(
            image_dimensions(ImageFormat::Webp, &webp(b"VP8X", &vp8x)),
            Some((4096, 640))
        );
        let image = Image::from_bytes("image/webp", &webp(b"VP8X", &vp8x)).unwrap();
        assert_eq!(image.format(), Some(ImageFormat::Webp));
        assert_eq!(image.source().media_type(), Some("image/webp"));
    }

    #[test]
    fn refuses_what_it_cannot_trust() {
        let p = png(1, 1);
        assert_eq!(
            Image::from_bytes("image/jpeg", &p),
            Err(MediaError::Mismatch {
                claimed: "image/jpeg".into(),
                found: Some("image/png")
            })
        );
        assert!(matches!(
            Image::from_bytes("image/tiff", &p),
            Err(MediaError::UnsupportedMediaType(_))
        ));
        assert_eq!(Image::png(&[]), Err(MediaError::Empty));
        assert!(matches!(
            Image::png(&p[..20]),
            Err(MediaError::Unreadable("image/png"))
        ));
        assert!(matches!(
            Image::jpeg(&[0xFF, 0xD8, 0xFF]),
            Err(MediaError::Unreadable(_))
        ));
        assert!(matches!(
            Image::from_base64("image/png", "***"),
            Err(MediaError::InvalidBase64(_))
        ));
        assert!(matches!(
            Image::from_url("ftp://x/y.png"),
            Err(MediaError::InvalidUrl(_))
        ));
        assert!(matches!(
            Image::from_url("https://"),
            Err(MediaError::InvalidUrl(_))
        ));
        assert!(Image::from_url("https://example.com/a.png").is_ok());
        let big = vec![0u8; MAX_MEDIA_BYTES + 1];
        assert!(matches!(Image::png(&big), Err(MediaError::TooLarge { .. })));
        assert!(Image::from_bytes_detect(b"hello").is_err());
        assert_eq!(
            Image::from_bytes_detect(&gif(2, 2)).unwrap().format(),
            Some(ImageFormat::Gif)
        );
    }

    #[test]
    fn data_urls_are_bytes() {
        let image = Image::png(&png(7, 9)).unwrap();
        let url = image.source().to_url();
        assert!(url.starts_with("data:image/png;base64,"));
        let back = Image::from_url(&url).unwrap();
        assert_eq!(back, image);
        assert_eq!(source_dimensions(back.source()), Some((7, 9)));
    }

    #[test]
    fn token_rules_follow_the_published_examples() {
        // Anthropic's table: 200×200 ≈ 54, 1000×1000 ≈ 1334, 1092×1092 ≈ 1590.
        let a = ImageTokenRule::Anthropic;
        assert_eq!(a.image_tokens(Some((200, 200))), 54);
        assert_eq!(a.image_tokens(Some((1092, 1092))), 1590);
        assert_eq!(a.image_tokens(Some((4000, 4000))), 1600);
        assert_eq!(a.image_tokens(None), 1600);
        // OpenAI's examples: 1024×1024 → 765; 2048×4096 → 1105.
        let o = ImageTokenRule::OpenAi;
        assert_eq!(o.image_tokens(Some((1024, 1024))), 765);
        assert_eq!(o.image_tokens(Some((2048, 4096))), 1105);
        assert_eq!(o.image_tokens(Some((100, 100))), 255);
        assert_eq!(
            ImageTokenRule::Larger.image_tokens(Some((1024, 1024))),
            a.image_tokens(Some((1024, 1024)))
        );
        assert_eq!(ImageTokenRule::for_model("claude-sonnet-4-5"), a);
        assert_eq!(ImageTokenRule::for_model("openai/gpt-4.1"), o);
        assert_eq!(ImageTokenRule::for_model("llama3"), ImageTokenRule::Larger);
    }

    #[test]
    fn pdfs_are_checked_and_their_pages_counted() {
        let pdf = b"%PDF-1.4\n<< /Type /Pages /Count 2 >>\n<< /Type /Page >>\n<</Type/Page>>";
        let doc = Document::pdf(pdf).unwrap();
        assert_eq!(doc.pages(), Some(2));
        assert_eq!(source_pages(doc.source()), Some(2));
        assert!(matches!(
            Document::pdf(&png(1, 1)),
            Err(MediaError::Mismatch { .. })
        ));
        let block: ContentBlock = doc.title("t").into();
        assert!(matches!(
            block,
            ContentBlock::Document { title: Some(_), .. }
        ));
    }

    #[test]
    fn a_format_displays_as_its_media_type() {
        assert_eq!(ImageFormat::Png.to_string(), "image/png");
        assert_eq!(ImageFormat::Webp.to_string(), "image/webp");
    }

    /// The base64 of a 32 MiB image is 44,739,244 characters (4 per started 3 bytes): that
    /// much is decoded, one character more is refused before any decoding.
    #[test]
    fn base64_up_to_the_encoded_limit_is_decoded_and_longer_is_refused_unread() {
        let limit = MAX_MEDIA_BYTES.div_ceil(3) * 4;
        assert_eq!(limit, 44_739_244);
        // Not base64 at all: decoding it says so, which shows it was decoded.
        let at_limit = "!".repeat(limit);
        assert!(matches!(
            Image::from_base64("image/png", &at_limit),
            Err(MediaError::InvalidBase64(_))
        ));
        let over = "!".repeat(limit + 1);
        assert_eq!(
            Image::from_base64("image/png", &over),
            Err(MediaError::TooLarge {
                what: "the image",
                size: (limit + 1) / 4 * 3,
                limit: MAX_MEDIA_BYTES,
            })
        );
    }

    #[test]
    fn exactly_the_size_limit_is_accepted() {
        let mut pdf = vec![b' '; MAX_MEDIA_BYTES];
        pdf[..5].copy_from_slice(b"%PDF-");
        assert!(Document::pdf(&pdf).is_ok());
        pdf.push(b' ');
        assert_eq!(
            Document::pdf(&pdf),
            Err(MediaError::TooLarge {
                what: "the document",
                size: MAX_MEDIA_BYTES + 1,
                limit: MAX_MEDIA_BYTES,
            })
        );
    }

    #[test]
    fn a_url_needs_a_host_after_its_scheme() {
        for bare in ["http://", "https://", "HTTP://"] {
            assert_eq!(
                Image::from_url(bare),
                Err(MediaError::InvalidUrl(bare.to_owned()))
            );
        }
        assert!(Image::from_url("http://a").is_ok());
        assert!(Image::from_url("HTTPS://a").is_ok());
        assert!(Document::from_url("http://a/x.pdf").is_ok());
    }

    #[test]
    fn a_pdf_comes_from_base64_or_a_data_url_checked_like_bytes() {
        let pdf = b"%PDF-1.7\n1 0 obj << /Type /Page >> endobj\n%%EOF";
        let b64 = base64::engine::general_purpose::STANDARD.encode(pdf);
        let from_bytes = Document::pdf(pdf).unwrap();
        assert_eq!(Document::pdf_base64(&b64).unwrap(), from_bytes);
        let url = format!("data:application/pdf;base64,{b64}");
        assert_eq!(Document::from_url(&url).unwrap(), from_bytes);
        assert!(matches!(
            Document::pdf_base64("not base64!"),
            Err(MediaError::InvalidBase64(_))
        ));
        let not_pdf = base64::engine::general_purpose::STANDARD.encode(b"hello");
        assert!(matches!(
            Document::pdf_base64(&not_pdf),
            Err(MediaError::Mismatch { .. })
        ));
        assert_eq!(
            Document::from_url("data:application/pdf,raw"),
            Err(MediaError::InvalidUrl(
                "data:application/pdf,raw".to_owned()
            ))
        );
        let long = "A".repeat(MAX_MEDIA_BYTES / 3 * 4 + 8);
        assert!(matches!(
            Document::pdf_base64(&long),
            Err(MediaError::TooLarge {
                what: "the document",
                ..
            })
        ));
    }

    #[test]
    fn a_refused_url_is_shown_whole_when_short_and_cut_at_a_char_boundary_when_long() {
        assert_eq!(
            Image::from_url("ftp://x/y.png"),
            Err(MediaError::InvalidUrl("ftp://x/y.png".to_owned()))
        );
        // 80 bytes of ASCII is shown whole; one more byte is cut to 80 and marked.
        let exact = format!("ftp://{}", "a".repeat(74));
        assert_eq!(
            Image::from_url(&exact),
            Err(MediaError::InvalidUrl(exact.clone()))
        );
        let long = format!("{exact}b");
        assert_eq!(
            Image::from_url(&long),
            Err(MediaError::InvalidUrl(format!("{exact}…")))
        );
        // A two-byte character across byte 80 is left out whole.
        let wide = format!("ftp://{}é tail", "a".repeat(73));
        assert_eq!(
            Image::from_url(&wide),
            Err(MediaError::InvalidUrl(format!("ftp://{}…", "a".repeat(73))))
        );
    }

    #[test]
    fn an_image_without_width_or_height_is_unreadable() {
        for (w, h) in [(0, 5), (5, 0), (0, 0)] {
            assert_eq!(
                Image::png(&png(w, h)),
                Err(MediaError::Unreadable("image/png")),
                "{w}×{h}"
            );
        }
        assert_eq!(Image::png(&png(1, 1)).unwrap().dimensions(), Some((1, 1)));
    }

    #[test]
    fn webp_extended_sizes_use_all_24_bits() {
        // Canvas 70,000 × 3: width - 1 = 0x01_11_6F, little-endian.
        let vp8x = [0, 0, 0, 0, 0x6F, 0x11, 0x01, 0x02, 0, 0];
        assert_eq!(
            image_dimensions(ImageFormat::Webp, &webp(b"VP8X", &vp8x)),
            Some((70_000, 3))
        );
    }

    /// A JPEG: SOI, then `segments`, then a baseline SOF0 of `w` × `h`.
    fn jpeg_with(segments: &[u8], w: u16, h: u16) -> Vec<u8> {
        let mut b = vec![0xFF, 0xD8];
        b.extend_from_slice(segments);
        b.extend_from_slice(&[0xFF, 0xC0, 0x00, 0x11, 0x08]);
        b.extend_from_slice(&h.to_be_bytes());
        b.extend_from_slice(&w.to_be_bytes());
        b.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
        b
    }

    #[test]
    fn jpeg_segments_are_walked_by_their_kind() {
        let dims =
            |segments: &[u8]| image_dimensions(ImageFormat::Jpeg, &jpeg_with(segments, 32, 24));
        assert_eq!(dims(&[]), Some((32, 24)));
        // A standalone marker (RST0, TEM) has no length: the next marker follows at once.
        assert_eq!(dims(&[0xFF, 0xD0]), Some((32, 24)));
        assert_eq!(dims(&[0xFF, 0x01]), Some((32, 24)));
        // An empty segment (length 2 counts only itself) is skipped.
        assert_eq!(dims(&[0xFF, 0xE1, 0x00, 0x02]), Some((32, 24)));
        // A length under 2 is damage.
        assert_eq!(dims(&[0xFF, 0xE1, 0x00, 0x01, 0xFF]), None);
        // A Huffman table (C4), like the other non-frame C-markers, is skipped by its length,
        // not read as the frame.
        for marker in [0xC4, 0xC8, 0xCC] {
            assert_eq!(
                dims(&[0xFF, marker, 0x00, 0x08, 0, 0, 0, 0, 0, 0]),
                Some((32, 24)),
                "{marker:#x}"
            );
        }
        // Start of scan or end of image before any frame: no size, even if a frame follows.
        assert_eq!(dims(&[0xFF, 0xDA, 0x00, 0x02]), None);
        assert_eq!(dims(&[0xFF, 0xD9, 0x00, 0x02]), None);
    }

    #[test]
    fn a_jpeg_size_is_found_behind_large_metadata() {
        // A 20 KB EXIF segment before the frame, as cameras write.
        let mut exif = vec![0xFF, 0xE1];
        exif.extend_from_slice(&20_000u16.to_be_bytes());
        exif.resize(2 + 20_000, 0);
        let image = Image::jpeg(&jpeg_with(&exif, 4000, 3000)).unwrap();
        assert_eq!(image.dimensions(), Some((4000, 3000)));
        assert_eq!(source_dimensions(image.source()), Some((4000, 3000)));
        // A PNG source is read from its first bytes.
        let png = Image::png(&png(640, 480)).unwrap();
        assert_eq!(source_dimensions(png.source()), Some((640, 480)));
    }

    #[test]
    fn token_rules_scale_large_images_first() {
        // Anthropic scales the long edge to 1568 first: 3136×200 is counted as 1568×100.
        assert_eq!(
            ImageTokenRule::Anthropic.image_tokens(Some((3136, 200))),
            210
        );
        // OpenAI fits within 2048 first: 4096×1000 → 2048×500 (short side already under
        // 768) → 4 × 1 tiles.
        assert_eq!(
            ImageTokenRule::OpenAi.image_tokens(Some((4096, 1000))),
            85 + 170 * 4
        );
        // An image of unknown size counts as the largest: 8 tiles.
        assert_eq!(ImageTokenRule::OpenAi.image_tokens(None), 85 + 170 * 8);
        assert_eq!(ImageTokenRule::Larger.image_tokens(None), 1600);
    }

    #[test]
    fn every_openai_model_family_gets_the_openai_rule() {
        for name in [
            "gpt-4o",
            "chatgpt-4o-latest",
            "o1-mini",
            "o3",
            "o4-mini",
            "OpenAI/GPT-5",
        ] {
            assert_eq!(
                ImageTokenRule::for_model(name),
                ImageTokenRule::OpenAi,
                "{name}"
            );
        }
        assert_eq!(
            ImageTokenRule::for_model("anthropic/Claude-Opus-4"),
            ImageTokenRule::Anthropic
        );
        assert_eq!(ImageTokenRule::for_model("omni"), ImageTokenRule::Larger);
    }

    proptest::proptest! {
        #[test]
        fn header_readers_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            for format in [ImageFormat::Png, ImageFormat::Jpeg, ImageFormat::Gif, ImageFormat::Webp] {
                let _ = image_dimensions(format, &bytes);
            }
            let _ = Image::from_bytes_detect(&bytes);
            let _ = Document::pdf(&bytes);
            let mut jpeg = vec![0xFF, 0xD8, 0xFF];
            jpeg.extend_from_slice(&bytes);
            let _ = image_dimensions(ImageFormat::Jpeg, &jpeg);
        }
    }
}
