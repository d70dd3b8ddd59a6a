use super::*;
use crate::sdp::Fingerprint;

fn fps() -> Vec<Fingerprint> {
    vec![Fingerprint {
        algorithm: "sha-256".into(),
        digest: "11:22:33:44".into(),
    }]
}

const NOW: u64 = 1_800_000_000;

#[test]
fn server_assertion_verifies_as_a_client_checks_it() {
    let key = OperatorKey::generate();
    let token = key.token(NOW, 3600, &Claims::new());
    let value = key.assertion("example.org", &token, &fps());
    let assertion = Assertion::parse(&value).unwrap();
    assert_eq!(assertion.domain, "example.org");
    let id = assertion.verify(&fps(), &Trust::SelfSigned, NOW).unwrap();
    assert!(id.token_verified);
    assert_eq!(id.claims["cpk"], key.jwk());
    assert_eq!(id.claims["exp"], NOW + 3600);
    // Another DTLS certificate's fingerprints: refused.
    let other = vec![Fingerprint {
        algorithm: "sha-256".into(),
        digest: "11:22:33:45".into(),
    }];
    assert_eq!(
        assertion.verify(&other, &Trust::SelfSigned, NOW),
        Err(IdentityError::BadFingerprintSignature)
    );
    assert_eq!(
        assertion.verify(&fps(), &Trust::SelfSigned, NOW + 3600),
        Err(IdentityError::Expired)
    );
}

#[test]
fn client_token_is_checked_against_the_trusted_keys() {
    // The test plays the auth service: its key signs a token carrying the player's key.
    let auth = OperatorKey::generate();
    let player = OperatorKey::generate();
    let mut claims = Claims::new();
    claims.insert("xuid".into(), "2535400000000000".into());
    claims.insert("cpk".into(), player.jwk());
    let header = json!({"alg": "ES384", "typ": "JWT"});
    let (input, sig) = auth.jws_compact(&header, Value::Object(claims).to_string().as_bytes());
    let token = format!("{input}.{sig}");
    let value = envelope("auth.example", &token, &player.sign_fingerprints(&fps()));
    let assertion = Assertion::parse(&value).unwrap();

    let id = assertion
        .verify(&fps(), &Trust::Keys(vec![auth.public()]), NOW)
        .unwrap();
    assert_eq!(id.claims["xuid"], "2535400000000000");
    assert!(id.token_verified);
    assert_eq!(
        assertion.verify(&fps(), &Trust::Keys(vec![player.public()]), NOW),
        Err(IdentityError::UntrustedToken)
    );
    let unchecked = assertion.verify(&fps(), &Trust::Unchecked, NOW).unwrap();
    assert!(!unchecked.token_verified);
}

#[test]
fn jwks_and_spki_cpk_forms() {
    let key = OperatorKey::generate();
    let jwks = json!({"keys": [key.jwk(), {"kty": "RSA", "n": "x", "e": "AQAB"}]}).to_string();
    assert_eq!(PublicKey::from_jwks(&jwks).unwrap(), vec![key.public()]);
    let der = key
        .key
        .verifying_key()
        .to_public_key_der()
        .unwrap()
        .into_vec();
    let cpk = Value::String(STANDARD.encode(der));
    assert_eq!(PublicKey::from_cpk(&cpk).unwrap(), key.public());
}

#[test]
fn pem_round_trip() {
    let key = OperatorKey::generate();
    let again = OperatorKey::from_pem(&key.to_pem()).unwrap();
    assert_eq!(again.jwk(), key.jwk());
    assert_eq!(
        OperatorKey::from_pem("-----BEGIN NOPE-----").unwrap_err(),
        IdentityError::BadKey
    );
}

#[test]
fn malformed_assertions_are_errors_not_panics() {
    for bad in [
        "",
        "!!!",
        "e30=",
        "eyJhc3NlcnRpb24iOjF9",
        &"A".repeat(MAX_IDENTITY + 1),
    ] {
        assert!(matches!(
            Assertion::parse(bad),
            Err(IdentityError::Malformed(_))
        ));
    }
    let assertion = Assertion {
        domain: String::new(),
        token: "a.b.c".into(),
        fingerprints: "x..y".into(),
    };
    assert!(assertion.verify(&fps(), &Trust::Unchecked, NOW).is_err());
}
