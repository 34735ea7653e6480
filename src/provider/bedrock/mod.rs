//! (Scaffold) the bedrock wire format: wire types, request encoding, stream decoding, the client.

pub(crate) mod decode;
pub(crate) mod request;
