//! (Scaffold) the ollama wire format: wire types, request encoding, stream decoding, the client.

pub(crate) mod decode;
pub(crate) mod request;
