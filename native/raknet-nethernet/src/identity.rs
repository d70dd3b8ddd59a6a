//! NetherNet's identity assertions (RFC 8827 envelopes in `a=identity`): the server's, signed
//! with the operator's long-lived P-384 key, and the checks on a client's.
//!
//! Envelope: base64 of `{"idp":{"domain":..,"protocol":"default"},"assertion":"<json>"}`, the
//! assertion `{"token":<JWT>,"fingerprints":<detached JWS>}`. The JWS signs the canonical JSON
//! of the SDP's `a=fingerprint` lines with the key in the token's `cpk` claim.

use std::fmt;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use p384::ecdsa::signature::{Signer, Verifier};
#[cfg(test)]
use p384::pkcs8::EncodePublicKey;
use p384::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, LineEnding};
use serde_json::{json, Map, Value};

use crate::sdp::{canonical_fingerprints, Fingerprint};

/// Claims of a token, as its JSON object.
pub type Claims = Map<String, Value>;

/// The largest `a=identity` value looked at, in bytes.
pub const MAX_IDENTITY: usize = 8 * 1024;

/// Why an assertion was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityError {
    /// No `a=identity` where one is required.
    Missing,
    /// Not base64 / JSON of the expected shape, or over [`MAX_IDENTITY`].
    Malformed(&'static str),
    /// A signature algorithm other than ES256 and ES384.
    UnsupportedAlgorithm(String),
    /// The token's signature matches none of the trusted keys.
    UntrustedToken,
    /// The fingerprints' signature does not match the token's `cpk`.
    BadFingerprintSignature,
    /// The token's `exp` has passed (or `nbf` not come).
    Expired,
    /// An operator key file that is not a P-384 PKCS#8 PEM key.
    BadKey,
}

impl fmt::Display for IdentityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => f.write_str("no a=identity in the offer"),
            Self::Malformed(what) => write!(f, "malformed identity assertion: {what}"),
            Self::UnsupportedAlgorithm(alg) => write!(f, "unsupported JWS algorithm {alg:?}"),
            Self::UntrustedToken => f.write_str("token not signed by a trusted key"),
            Self::BadFingerprintSignature => {
                f.write_str("fingerprint signature does not match the token's cpk")
            }
            Self::Expired => f.write_str("token expired or not yet valid"),
            Self::BadKey => f.write_str("not a P-384 PKCS#8 PEM private key"),
        }
    }
}

impl std::error::Error for IdentityError {}

/// A public key that can check ES256 or ES384 signatures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PublicKey {
    /// P-256 (ES256).
    P256(p256::ecdsa::VerifyingKey),
    /// P-384 (ES384).
    P384(p384::ecdsa::VerifyingKey),
}

impl PublicKey {
    /// From a JWK object (`kty` EC, `crv` P-256 or P-384).
    pub fn from_jwk(jwk: &Value) -> Result<Self, IdentityError> {
        let field = |name: &'static str| {
            jwk.get(name)
                .and_then(Value::as_str)
                .ok_or(IdentityError::Malformed("JWK field missing"))
        };
        if field("kty")? != "EC" {
            return Err(IdentityError::Malformed("JWK kty is not EC"));
        }
        let x = b64url(field("x")?)?;
        let y = b64url(field("y")?)?;
        let mut sec1 = Vec::with_capacity(1 + x.len() + y.len());
        sec1.push(4);
        sec1.extend_from_slice(&x);
        sec1.extend_from_slice(&y);
        let bad = |_| IdentityError::Malformed("JWK point not on the curve");
        match field("crv")? {
            "P-256" if x.len() == 32 && y.len() == 32 => Ok(Self::P256(
                p256::ecdsa::VerifyingKey::from_sec1_bytes(&sec1).map_err(bad)?,
            )),
            "P-384" if x.len() == 48 && y.len() == 48 => Ok(Self::P384(
                p384::ecdsa::VerifyingKey::from_sec1_bytes(&sec1).map_err(bad)?,
            )),
            _ => Err(IdentityError::Malformed("JWK curve or coordinates")),
        }
    }

    /// From a `cpk` claim: a JWK object, or base64 of a DER SubjectPublicKeyInfo (the form
    /// Bedrock's login tokens use).
    pub fn from_cpk(cpk: &Value) -> Result<Self, IdentityError> {
        match cpk {
            Value::Object(_) => Self::from_jwk(cpk),
            Value::String(text) => {
                let der = b64any(text)?;
                p384::ecdsa::VerifyingKey::from_public_key_der(&der)
                    .map(Self::P384)
                    .or_else(|_| {
                        p256::ecdsa::VerifyingKey::from_public_key_der(&der).map(Self::P256)
                    })
                    .map_err(|_| IdentityError::Malformed("cpk is not a P-256/P-384 key"))
            }
            _ => Err(IdentityError::Malformed("cpk claim missing")),
        }
    }

    /// Keys of a JWKS document (`{"keys":[...]}`); keys it cannot use are skipped.
    pub fn from_jwks(jwks: &str) -> Result<Vec<Self>, IdentityError> {
        let doc: Value =
            serde_json::from_str(jwks).map_err(|_| IdentityError::Malformed("JWKS not JSON"))?;
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or(IdentityError::Malformed("JWKS has no keys"))?;
        Ok(keys.iter().filter_map(|k| Self::from_jwk(k).ok()).collect())
    }

    fn verify(&self, alg: &str, signing_input: &[u8], sig: &[u8]) -> Result<(), IdentityError> {
        let ok = match (alg, self) {
            ("ES256", Self::P256(key)) => p256::ecdsa::Signature::from_slice(sig)
                .is_ok_and(|s| key.verify(signing_input, &s).is_ok()),
            ("ES384", Self::P384(key)) => p384::ecdsa::Signature::from_slice(sig)
                .is_ok_and(|s| key.verify(signing_input, &s).is_ok()),
            ("ES256" | "ES384", _) => false,
            (other, _) => return Err(IdentityError::UnsupportedAlgorithm(other.to_owned())),
        };
        ok.then_some(()).ok_or(IdentityError::UntrustedToken)
    }
}

/// The operator's long-lived key: signs the server's token and answers' fingerprints.
#[derive(Clone)]
pub struct OperatorKey {
    key: p384::ecdsa::SigningKey,
}

impl fmt::Debug for OperatorKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OperatorKey")
            .field("cpk", &self.jwk())
            .finish_non_exhaustive()
    }
}

impl OperatorKey {
    /// A new random key.
    pub fn generate() -> Self {
        Self {
            key: p384::ecdsa::SigningKey::random(&mut rand_core::OsRng),
        }
    }

    /// From a PKCS#8 PEM file's text.
    pub fn from_pem(pem: &str) -> Result<Self, IdentityError> {
        p384::ecdsa::SigningKey::from_pkcs8_pem(pem)
            .map(|key| Self { key })
            .map_err(|_| IdentityError::BadKey)
    }

    /// As PKCS#8 PEM, to persist.
    pub fn to_pem(&self) -> String {
        self.key
            .to_pkcs8_pem(LineEnding::LF)
            .map(|pem| pem.to_string())
            .unwrap_or_default()
    }

    /// The public key as the JWK clients pin (`cpk`).
    pub fn jwk(&self) -> Value {
        let point = self.key.verifying_key().to_encoded_point(false);
        let coord =
            |c: Option<&p384::FieldBytes>| URL_SAFE_NO_PAD.encode(c.map_or(&[][..], |c| &c[..]));
        json!({"kty": "EC", "crv": "P-384", "x": coord(point.x()), "y": coord(point.y())})
    }

    /// The public key, to check what this key signed.
    pub fn public(&self) -> PublicKey {
        PublicKey::P384(*self.key.verifying_key())
    }

    fn jws_compact(&self, header: &Value, payload: &[u8]) -> (String, String) {
        let head = URL_SAFE_NO_PAD.encode(header.to_string());
        let body = URL_SAFE_NO_PAD.encode(payload);
        let input = format!("{head}.{body}");
        let sig: p384::ecdsa::Signature = self.key.sign(input.as_bytes());
        (input, URL_SAFE_NO_PAD.encode(sig.to_bytes()))
    }

    /// The server's token: a JWT self-signed with this key, carrying it as `cpk`, valid from
    /// `now_unix` for `lifetime_s` seconds, with `extra` claims (e.g. `iss`).
    pub fn token(&self, now_unix: u64, lifetime_s: u64, extra: &Claims) -> String {
        let mut claims = extra.clone();
        claims.insert("cpk".into(), self.jwk());
        claims.insert("iat".into(), now_unix.into());
        claims.insert("exp".into(), (now_unix + lifetime_s).into());
        self.sign_jwt(claims)
    }

    /// A JWT (ES384) of `claims`, signed with this key: the server's token, or in tests and
    /// tools a token as an auth service would issue.
    pub fn sign_jwt(&self, claims: Claims) -> String {
        let header = json!({"alg": "ES384", "typ": "JWT"});
        let (input, sig) = self.jws_compact(&header, Value::Object(claims).to_string().as_bytes());
        format!("{input}.{sig}")
    }

    /// The detached JWS over `fingerprints` (`header..signature`).
    pub fn sign_fingerprints(&self, fingerprints: &[Fingerprint]) -> String {
        let payload = canonical_fingerprints(fingerprints);
        let (input, sig) = self.jws_compact(&json!({"alg": "ES384"}), payload.as_bytes());
        let head = input.split('.').next().unwrap_or_default();
        format!("{head}..{sig}")
    }

    /// The `a=identity` value for an answer with these fingerprints.
    pub fn assertion(&self, domain: &str, token: &str, fingerprints: &[Fingerprint]) -> String {
        envelope(domain, token, &self.sign_fingerprints(fingerprints))
    }
}

/// The base64 envelope of an assertion.
pub fn envelope(domain: &str, token: &str, fingerprints_jws: &str) -> String {
    let assertion = json!({"token": token, "fingerprints": fingerprints_jws}).to_string();
    let env = json!({"idp": {"domain": domain, "protocol": "default"}, "assertion": assertion});
    STANDARD.encode(env.to_string())
}

/// An assertion taken out of its envelope (nothing checked yet).
#[derive(Debug, Clone, PartialEq)]
pub struct Assertion {
    /// `idp.domain`.
    pub domain: String,
    /// The JWT.
    pub token: String,
    /// The detached JWS over the fingerprints.
    pub fingerprints: String,
}

/// What a checked assertion established.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The token's claims.
    pub claims: Claims,
    /// The token's signature matched a trusted key (or its own `cpk` under
    /// [`Trust::SelfSigned`]).
    pub token_verified: bool,
}

/// What a token's signature must match.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Any of these keys (e.g. the auth service's JWKS).
    Keys(Vec<PublicKey>),
    /// The key in its own `cpk` claim (a server's token, checked as a client does).
    SelfSigned,
    /// Nothing: the claims are read but the token's signature not checked.
    Unchecked,
}

impl Assertion {
    /// Take an `a=identity` value apart.
    pub fn parse(value: &str) -> Result<Self, IdentityError> {
        if value.len() > MAX_IDENTITY {
            return Err(IdentityError::Malformed("a=identity too large"));
        }
        let env: Value = serde_json::from_slice(&b64any(value)?)
            .map_err(|_| IdentityError::Malformed("envelope is not JSON"))?;
        let domain = env
            .pointer("/idp/domain")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let inner: Value = env
            .get("assertion")
            .and_then(Value::as_str)
            .and_then(|a| serde_json::from_str(a).ok())
            .ok_or(IdentityError::Malformed("assertion is not a JSON string"))?;
        let text = |name| {
            inner
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(IdentityError::Malformed(
                    "assertion lacks token or fingerprints",
                ))
        };
        Ok(Self {
            domain,
            token: text("token")?,
            fingerprints: text("fingerprints")?,
        })
    }

    /// Check the token against `trust`, its time window against `now_unix`, and the
    /// fingerprints' signature against the token's `cpk` over `fingerprints`.
    pub fn verify(
        &self,
        fingerprints: &[Fingerprint],
        trust: &Trust,
        now_unix: u64,
    ) -> Result<Identity, IdentityError> {
        let (header, claims, input, sig) = split_jws(&self.token)?;
        let alg = header
            .get("alg")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let Value::Object(claims) = claims else {
            return Err(IdentityError::Malformed("token claims are not an object"));
        };
        let cpk = PublicKey::from_cpk(claims.get("cpk").unwrap_or(&Value::Null))?;
        let token_verified = match trust {
            Trust::Keys(keys) => {
                if !keys
                    .iter()
                    .any(|k| k.verify(alg, input.as_bytes(), &sig).is_ok())
                {
                    return Err(IdentityError::UntrustedToken);
                }
                true
            }
            Trust::SelfSigned => {
                cpk.verify(alg, input.as_bytes(), &sig)?;
                true
            }
            Trust::Unchecked => false,
        };
        let number = |name: &str| claims.get(name).and_then(Value::as_u64);
        if number("exp").is_some_and(|exp| now_unix >= exp)
            || number("nbf").is_some_and(|nbf| now_unix + 60 < nbf)
        {
            return Err(IdentityError::Expired);
        }
        // The detached JWS: header..signature, the payload rebuilt from the SDP.
        let mut parts = self.fingerprints.split('.');
        let (Some(head), Some(""), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(IdentityError::Malformed(
                "fingerprints is not a detached JWS",
            ));
        };
        let jws_header: Value = serde_json::from_slice(&b64url(head)?)
            .map_err(|_| IdentityError::Malformed("JWS header is not JSON"))?;
        let jws_alg = jws_header
            .get("alg")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let payload = URL_SAFE_NO_PAD.encode(canonical_fingerprints(fingerprints));
        cpk.verify(
            jws_alg,
            format!("{head}.{payload}").as_bytes(),
            &b64url(sig)?,
        )
        .map_err(|e| match e {
            IdentityError::UntrustedToken => IdentityError::BadFingerprintSignature,
            other => other,
        })?;
        Ok(Identity {
            claims,
            token_verified,
        })
    }
}

/// A compact JWS's header, payload (as JSON), signing input and signature.
fn split_jws(jws: &str) -> Result<(Value, Value, &str, Vec<u8>), IdentityError> {
    let (input, sig) = jws
        .rsplit_once('.')
        .ok_or(IdentityError::Malformed("token is not a JWT"))?;
    let (head, body) = input
        .split_once('.')
        .ok_or(IdentityError::Malformed("token is not a JWT"))?;
    let json = |part| {
        serde_json::from_slice::<Value>(&b64url(part)?)
            .map_err(|_| IdentityError::Malformed("token part is not JSON"))
    };
    Ok((json(head)?, json(body)?, input, b64url(sig)?))
}

fn b64url(text: &str) -> Result<Vec<u8>, IdentityError> {
    URL_SAFE_NO_PAD
        .decode(text.trim_end_matches('='))
        .map_err(|_| IdentityError::Malformed("not base64url"))
}

/// Standard or URL-safe base64, padded or not.
fn b64any(text: &str) -> Result<Vec<u8>, IdentityError> {
    let text = text.trim().trim_end_matches('=');
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(text)
        .or_else(|_| URL_SAFE_NO_PAD.decode(text))
        .map_err(|_| IdentityError::Malformed("not base64"))
}

#[cfg(test)]
mod tests;
