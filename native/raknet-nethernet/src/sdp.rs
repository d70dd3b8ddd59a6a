//! What NetherNet's signaling needs from an SDP: its `a=fingerprint` lines, its session-level
//! `a=identity` (taken out before WebRTC sees the SDP), and a place to put ours in an answer.
//! The WebRTC stack parses the rest.

use std::fmt;

/// The largest offer accepted, in bytes (a Minecraft client's is about 1 KB).
pub const MAX_SDP: usize = 16 * 1024;
/// Lines in an offer at most.
pub const MAX_LINES: usize = 256;

/// One `a=fingerprint:<algorithm> <digest>` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Hash function, as written (`sha-256`).
    pub algorithm: String,
    /// Colon-separated hex, as written.
    pub digest: String,
}

/// An offer taken apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Offer {
    /// The SDP without its `a=identity` line, lines ended by CRLF, for the WebRTC stack.
    pub sdp: String,
    /// The `a=identity` value, if any (base64 of the RFC 8827 envelope).
    pub identity: Option<String>,
    /// Every `a=fingerprint` line, in order.
    pub fingerprints: Vec<Fingerprint>,
}

/// Why an SDP was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SdpError {
    /// Over [`MAX_SDP`] bytes or [`MAX_LINES`] lines.
    TooLarge,
    /// Not starting with `v=0`.
    NotSdp,
    /// No `m=application` section: not a data-channel offer.
    NoDataChannel,
    /// No `a=fingerprint` line (DTLS cannot be checked) or a malformed one.
    BadFingerprint,
    /// More than one `a=identity` line.
    DuplicateIdentity,
}

impl fmt::Display for SdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::TooLarge => "SDP too large",
            Self::NotSdp => "not an SDP (no v=0)",
            Self::NoDataChannel => "SDP offers no data channel (m=application)",
            Self::BadFingerprint => "SDP has no valid a=fingerprint",
            Self::DuplicateIdentity => "SDP has more than one a=identity",
        })
    }
}

impl std::error::Error for SdpError {}

impl Offer {
    /// Take an offer apart (CRLF or LF line ends).
    pub fn parse(text: &str) -> Result<Self, SdpError> {
        if text.len() > MAX_SDP {
            return Err(SdpError::TooLarge);
        }
        let lines: Vec<&str> = text
            .split('\n')
            .map(|l| l.strip_suffix('\r').unwrap_or(l))
            .filter(|l| !l.is_empty())
            .collect();
        if lines.len() > MAX_LINES {
            return Err(SdpError::TooLarge);
        }
        if lines.first() != Some(&"v=0") {
            return Err(SdpError::NotSdp);
        }
        if !lines.iter().any(|l| l.starts_with("m=application ")) {
            return Err(SdpError::NoDataChannel);
        }
        let mut identity = None;
        let mut fingerprints = Vec::new();
        let mut sdp = String::with_capacity(text.len() + lines.len());
        for line in lines {
            if let Some(value) = line.strip_prefix("a=identity:") {
                if identity.replace(value.trim().to_owned()).is_some() {
                    return Err(SdpError::DuplicateIdentity);
                }
                continue;
            }
            if let Some(value) = line.strip_prefix("a=fingerprint:") {
                fingerprints.push(parse_fingerprint(value).ok_or(SdpError::BadFingerprint)?);
            }
            sdp.push_str(line);
            sdp.push_str("\r\n");
        }
        if fingerprints.is_empty() {
            return Err(SdpError::BadFingerprint);
        }
        Ok(Self {
            sdp,
            identity,
            fingerprints,
        })
    }
}

fn parse_fingerprint(value: &str) -> Option<Fingerprint> {
    let (algorithm, digest) = value.trim().split_once(' ')?;
    let digest = digest.trim();
    let hex_pairs = digest
        .split(':')
        .all(|b| b.len() == 2 && b.bytes().all(|c| c.is_ascii_hexdigit()));
    (!algorithm.is_empty() && algorithm.len() <= 16 && digest.len() <= 191 && hex_pairs).then(
        || Fingerprint {
            algorithm: algorithm.to_owned(),
            digest: digest.to_owned(),
        },
    )
}

/// The `a=fingerprint` lines of an SDP (an answer we wrote; no other checks).
pub fn fingerprints(sdp: &str) -> Vec<Fingerprint> {
    sdp.lines()
        .filter_map(|l| l.trim_end().strip_prefix("a=fingerprint:"))
        .filter_map(parse_fingerprint)
        .collect()
}

/// The fingerprints as the canonical JSON the identity assertion signs: keys sorted, no
/// whitespace, `{"fingerprint":[{"algorithm":...,"digest":...}]}`.
pub fn canonical_fingerprints(fingerprints: &[Fingerprint]) -> String {
    let list: Vec<serde_json::Value> = fingerprints
        .iter()
        .map(|f| serde_json::json!({"algorithm": f.algorithm, "digest": f.digest}))
        .collect();
    // serde_json's maps are sorted by key and its output compact: canonical for these values
    // (ASCII strings).
    serde_json::json!({ "fingerprint": list }).to_string()
}

/// `sdp` with a session-level `a=identity:<value>` line: after the session's last
/// `a=fingerprint` line if it has one, else before the first `m=` line.
pub fn with_identity(sdp: &str, value: &str) -> String {
    let lines: Vec<&str> = sdp.lines().map(str::trim_end).collect();
    let first_media = lines
        .iter()
        .position(|l| l.starts_with("m="))
        .unwrap_or(lines.len());
    let at = lines[..first_media]
        .iter()
        .rposition(|l| l.starts_with("a=fingerprint:"))
        .map_or(first_media, |i| i + 1);
    let mut out = String::with_capacity(sdp.len() + value.len() + 16);
    for (i, line) in lines.iter().enumerate() {
        if i == at {
            out.push_str("a=identity:");
            out.push_str(value);
            out.push_str("\r\n");
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    if at == lines.len() {
        out.push_str("a=identity:");
        out.push_str(value);
        out.push_str("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER: &str = "v=0\r\no=- 1181923068 1181923196 IN IP4 0.0.0.0\r\ns=-\r\nt=0 0\r\n\
        a=fingerprint:sha-256 4A:AD:B9:B1:3F:82:18:3B:54:02:12:DF:3E:5D:49:6B:19:E5:7C:AB\r\n\
        a=identity:eyJpZHAiOnt9fQ==\r\n\
        m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\nc=IN IP4 0.0.0.0\r\n\
        a=sctp-port:5000\r\n";

    #[test]
    fn offer_loses_its_identity_and_keeps_the_rest() {
        let offer = Offer::parse(OFFER).unwrap();
        assert_eq!(offer.identity.as_deref(), Some("eyJpZHAiOnt9fQ=="));
        assert!(!offer.sdp.contains("a=identity"));
        assert_eq!(
            offer.sdp,
            OFFER.replace("a=identity:eyJpZHAiOnt9fQ==\r\n", "")
        );
        assert_eq!(
            offer.fingerprints,
            vec![Fingerprint {
                algorithm: "sha-256".into(),
                digest: "4A:AD:B9:B1:3F:82:18:3B:54:02:12:DF:3E:5D:49:6B:19:E5:7C:AB".into()
            }]
        );
    }

    #[test]
    fn canonical_json_is_the_guides() {
        let offer = Offer::parse(OFFER).unwrap();
        assert_eq!(
            canonical_fingerprints(&offer.fingerprints),
            r#"{"fingerprint":[{"algorithm":"sha-256","digest":"4A:AD:B9:B1:3F:82:18:3B:54:02:12:DF:3E:5D:49:6B:19:E5:7C:AB"}]}"#
        );
    }

    #[test]
    fn refusals() {
        assert_eq!(Offer::parse("hello"), Err(SdpError::NotSdp));
        assert_eq!(
            Offer::parse("v=0\r\nm=audio 9 RTP/AVP 0\r\n"),
            Err(SdpError::NoDataChannel)
        );
        let no_fp = OFFER.replace("a=fingerprint:", "a=x-fingerprint:");
        assert_eq!(Offer::parse(&no_fp), Err(SdpError::BadFingerprint));
        let bad_fp = OFFER.replace("4A:AD", "4G:AD");
        assert_eq!(Offer::parse(&bad_fp), Err(SdpError::BadFingerprint));
        let twice = OFFER.replace("m=application", "a=identity:x\r\nm=application");
        assert_eq!(Offer::parse(&twice), Err(SdpError::DuplicateIdentity));
        assert_eq!(Offer::parse(&"v=0\n".repeat(300)), Err(SdpError::TooLarge));
        assert_eq!(
            Offer::parse(&" ".repeat(MAX_SDP + 1)),
            Err(SdpError::TooLarge)
        );
    }

    #[test]
    fn identity_goes_after_the_session_fingerprint() {
        let offer = Offer::parse(OFFER).unwrap();
        let back = with_identity(&offer.sdp, "eyJpZHAiOnt9fQ==");
        assert_eq!(back, OFFER);
        let no_session_fp = "v=0\r\ns=-\r\nm=application 9 x\r\na=fingerprint:sha-256 AA\r\n";
        assert_eq!(
            with_identity(no_session_fp, "ID"),
            "v=0\r\ns=-\r\na=identity:ID\r\nm=application 9 x\r\na=fingerprint:sha-256 AA\r\n"
        );
    }
}
