//! OpenAI Chat Completions (and compatible servers): wire types, request encoding, stream
//! decoding and the client.

pub(crate) mod decode;
