//! The Minecraft Bedrock MOTD carried in unconnected pongs (protocol reference §4.3).
//!
//! On the wire the pong's payload is a u16 big-endian length followed by a UTF-8 string of
//! semicolon-separated fields, e.g.
//! `MCPE;Dedicated Server;527;1.19.1;0;10;13253860892328930865;Bedrock level;Survival;1;19132;19133;`

use std::fmt::Write as _;

use bytes::{BufMut, Bytes};

/// The fields of a Bedrock server's MOTD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BedrockMotd {
    /// `MCPE`, or `MCEE` for Education Edition.
    pub edition: String,
    /// First MOTD line (may hold § colour codes).
    pub motd: String,
    /// Game protocol number, e.g. 527.
    pub protocol_version: u32,
    /// Game version name, e.g. `1.19.1`.
    pub version_name: String,
    /// Players online.
    pub players_online: u32,
    /// Maximum players.
    pub max_players: u32,
    /// Server unique id, conventionally the RakNet GUID.
    pub server_guid: u64,
    /// Second MOTD line, usually the level name.
    pub sub_motd: String,
    /// Game mode name: `Survival`, `Creative`, `Adventure`.
    pub game_mode: String,
    /// Numeric game-mode field (BDS sends 1).
    pub game_mode_numeric: u32,
    /// IPv4 port.
    pub port_v4: u16,
    /// IPv6 port.
    pub port_v6: u16,
}

impl BedrockMotd {
    /// Parse a pong payload (length prefix included). `None` when it is not a Bedrock MOTD:
    /// no valid length prefix, not UTF-8, an unknown edition, or a non-numeric number field.
    /// Fields after the player counts are optional, as servers differ in how many they send.
    pub fn parse(data: &[u8]) -> Option<Self> {
        let (len, rest) = data.split_first_chunk::<2>()?;
        let text = std::str::from_utf8(rest.get(..usize::from(u16::from_be_bytes(*len)))?).ok()?;
        let mut fields = text.split(';');
        let edition = fields.next()?.to_owned();
        if edition != "MCPE" && edition != "MCEE" {
            return None;
        }
        let motd = fields.next()?.to_owned();
        let protocol_version = fields.next()?.trim().parse().ok()?;
        let version_name = fields.next()?.to_owned();
        let players_online = fields.next()?.trim().parse().ok()?;
        let max_players = fields.next()?.trim().parse().ok()?;
        let opt = |f: Option<&str>| f.filter(|s| !s.is_empty()).map(str::to_owned);
        let server_guid = opt(fields.next()).map_or(Some(0), |s| s.trim().parse().ok())?;
        let sub_motd = opt(fields.next()).unwrap_or_default();
        let game_mode = opt(fields.next()).unwrap_or_default();
        let game_mode_numeric = opt(fields.next()).map_or(Some(0), |s| s.trim().parse().ok())?;
        let port_v4 = opt(fields.next()).map_or(Some(0), |s| s.trim().parse().ok())?;
        let port_v6 = opt(fields.next()).map_or(Some(0), |s| s.trim().parse().ok())?;
        Some(Self {
            edition,
            motd,
            protocol_version,
            version_name,
            players_online,
            max_players,
            server_guid,
            sub_motd,
            game_mode,
            game_mode_numeric,
            port_v4,
            port_v6,
        })
    }

    /// The MOTD string, with the trailing `;` that servers conventionally add.
    pub fn to_motd_string(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{};{};{};{};{};{};{};{};{};{};{};{};",
            self.edition,
            self.motd,
            self.protocol_version,
            self.version_name,
            self.players_online,
            self.max_players,
            self.server_guid,
            self.sub_motd,
            self.game_mode,
            self.game_mode_numeric,
            self.port_v4,
            self.port_v6
        );
        s
    }

    /// The pong payload: u16 length and the MOTD string (truncated to 65535 bytes).
    pub fn to_pong_data(&self) -> Bytes {
        let s = self.to_motd_string();
        let text = &s.as_bytes()[..s.len().min(usize::from(u16::MAX))];
        let mut out = Vec::with_capacity(2 + text.len());
        out.put_u16(text.len() as u16);
        out.put_slice(text);
        out.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    #[test]
    fn parses_an_official_server_motd_pong_payload() {
        // §15 F: the tail of a pong served by an official server for a Minecraft app.
        let data = hex(
            "0048 4d4350453b72616b6e65742d7079206563686f20706565723b3339303b312e31342e36303b303b31303b303b706565723b
             537572766976616c3b313b31393730323b31393730333b",
        );
        let m = BedrockMotd::parse(&data).unwrap();
        assert_eq!(m.motd, "raknet-py echo peer");
        assert_eq!(m.protocol_version, 390);
        assert_eq!(m.version_name, "1.14.60");
        assert_eq!((m.players_online, m.max_players), (0, 10));
        assert_eq!(m.sub_motd, "peer");
        assert_eq!((m.port_v4, m.port_v6), (19702, 19703));
        assert_eq!(m.to_pong_data(), data);
    }

    #[test]
    fn rejects_non_motd_payloads() {
        assert_eq!(BedrockMotd::parse(b"official-motd"), None);
        assert_eq!(BedrockMotd::parse(&[0, 4, b'M', b'C']), None);
        assert_eq!(BedrockMotd::parse(b"\x00\x0cMCPE;a;x;1;0;1"), None);
    }

    #[test]
    fn short_motd_defaults_missing_fields() {
        let m = BedrockMotd::parse(b"\x00\x0fMCPE;a;1;v;2;3;").unwrap();
        assert_eq!((m.players_online, m.max_players, m.server_guid), (2, 3, 0));
    }
}
