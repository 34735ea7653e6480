//! Anthropic Messages: wire types, request encoding, stream decoding and the client.

pub(crate) mod decode;
