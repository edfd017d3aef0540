//! How a request ended, as the request metrics label it (`outcome`): one
//! list, from which the labels, the error tables' rows and the README's
//! list (a test compares them) are all taken.

use std::fmt;

/// Declares [`Outcome`], one variant per label, and everything derived
/// from that one list.
macro_rules! outcomes {
    ($($(#[doc = $doc:literal])* $variant:ident => $label:literal,)*) => {
        /// How a request ended.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Outcome {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Outcome {
            /// Every outcome, in declaration order.
            pub const ALL: &[Outcome] = &[$(Outcome::$variant),*];

            /// The label.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Outcome::$variant => $label,)*
                }
            }
        }
    };
}

outcomes! {
    /// Sent to the owner's backends, which answered.
    Proxied => "proxied",
    /// Sent to the owner's region's shardgate, which answered.
    ForwardedToPeer => "forwarded_to_peer",
    /// A create route's id minted, and the owner answered.
    Minted => "minted",
    /// A fan-out that every region answered.
    Fanout => "fanout",
    /// A fan-out that some region failed, answered with the others.
    FanoutPartial => "fanout_partial",
    /// An id searched for in the regions.
    Searched => "searched",
    /// An id sent to the region a search found it in before.
    SearchCached => "search_cached",
    /// No route matched (or not with this method).
    NoRoute => "no_route",
    /// The id was missing, ambiguous or did not decode.
    BadId => "bad_id",
    /// The table names no owner, or cannot mint.
    NoOwner => "no_owner",
    /// A peer forwarded a unit this instance's table moved elsewhere (a newer epoch): 421.
    Misdirected => "misdirected",
    /// The request was refused as it came (framing, limits, a country, a page).
    BadRequest => "bad_request",
    /// The owner's region had no usable endpoint, or every one was at its limits.
    Unavailable => "unavailable",
    /// An upstream, or the whole request, ran out of time.
    Timeout => "timeout",
    /// An upstream failed.
    UpstreamError => "upstream_error",
    /// The request was larger than allowed.
    TooLarge => "too_large",
    /// A mesh loop, or the hop limit.
    Loop => "loop",
    /// A listener refused the connection at its limit.
    Refused => "refused",
    /// The proxy itself failed.
    ProxyError => "proxy_error",
    /// A search found the id in no region.
    NotFound => "not_found",
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
