//! Amazon Bedrock Converse: request encoding, stream decoding (over the AWS event stream of
//! `crate::wire::eventstream`) and, behind the cargo feature `bedrock`, the client with its SigV4
//! signing.

#[cfg(feature = "bedrock")]
mod client;
pub(crate) mod decode;
pub(crate) mod request;

#[cfg(feature = "bedrock")]
pub use client::{AwsCredentials, AwsCredentialsProvider, BedrockClient};
