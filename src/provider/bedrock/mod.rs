//! Amazon Bedrock Converse: request encoding, stream decoding (over the AWS event stream of
//! `crate::wire::eventstream`) and, behind the cargo feature `bedrock`, the client with its SigV4
//! signing.

#[cfg(feature = "bedrock")]
mod client;
pub(crate) mod decode;
#[cfg(any(test, feature = "testing"))]
pub(crate) mod mock;
pub(crate) mod request;

crate::provider::format::unit!(
    Bedrock,
    "Amazon Bedrock Converse",
    encode: |request, _model| request::encode(request),
    framing: EventStream,
);

#[cfg(feature = "bedrock")]
pub use client::{AwsCredentials, AwsCredentialsProvider, BedrockClient};
