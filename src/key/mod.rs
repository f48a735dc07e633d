//! Request keys: `route "/" client`, and more parts around the route when
//! `[key] parts` asks for them ([`KeyParts`]).
//!
//! A request's key is its normalised route ([`normalize_route`]) followed by its client
//! identity ([`Client`]) as the last segment — `api/search/203.0.113.7` — or just the client
//! when the route is empty. Rules are matched against it by longest segment prefix, so a
//! rule can name a route (`api/search`) or one client on a route
//! (`api/search/192.168.11.3`). The client is always exactly one segment: IPv6 networks
//! are written without a length and header values have `/` percent-encoded.

mod api_keys;
mod body;
mod client;
mod cookie;
mod forwarded;
mod invalid;
mod jwt;
mod parts;
mod path;
mod verified;

pub use api_keys::{ApiKeyOwner, ApiKeys, KeyDigest, Presented};
pub use body::{BodyProblem, MAX_REQUEST_JSON, RequestJson};
pub use client::{
    Client, ClientId, ClientSettings, ClientSource, MAX_HEADER_IDENTITY, PeerAddr, Plan,
    encode_segment,
};
pub(crate) use client::{SegmentBuffer, from_trusted_proxy};
pub use forwarded::TrustedProxies;
pub use invalid::{Invalid, OnInvalid};
pub use jwt::{JwtSettings, JwtVerifier, MAX_TOKEN, TokenFrom};
pub(crate) use parts::part_value;
pub use parts::{ABSENT, KeyPart, KeyParts, KeyPartsError, MAX_PART};
pub use path::{RouteSettings, normalize_route};
pub use verified::{Claims, Verified};
