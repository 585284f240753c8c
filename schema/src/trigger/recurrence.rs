//! A schedule's `recurrence` (`hub-triggers.md` §3.6, the Hub's
//! `schedule/recurrence.ts`): the IANA time zone, the local start and one
//! RRULE value, with the Hub's messages.

/// The RRULE keys the Hub accepts.
const RULE_KEYS: &[&str] = &[
    "FREQ",
    "INTERVAL",
    "COUNT",
    "UNTIL",
    "BYSECOND",
    "BYMINUTE",
    "BYHOUR",
    "BYDAY",
    "BYMONTHDAY",
    "BYYEARDAY",
    "BYWEEKNO",
    "BYMONTH",
    "BYSETPOS",
    "WKST",
];

/// The syntax message: bad syntax, a `RRULE:` prefix, a repeated or an
/// unsupported key.
pub(crate) const RULE_SYNTAX: &str = "Use one RRULE with distinct, supported RFC 5545 fields.";

const WEEKDAYS: &[&str] = &["MO", "TU", "WE", "TH", "FR", "SA", "SU"];
const FREQS: &[&str] = &[
    "SECONDLY", "MINUTELY", "HOURLY", "DAILY", "WEEKLY", "MONTHLY", "YEARLY",
];

/// `^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$` with a real calendar date and
/// a 24-hour time.
pub(crate) fn is_local_start(s: &str) -> bool {
    let b = s.as_bytes();
    let shape = b.len() == 19
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            10 => *c == b'T',
            13 | 16 => *c == b':',
            _ => c.is_ascii_digit(),
        });
    if !shape {
        return false;
    }
    let num = |r: std::ops::Range<usize>| s.get(r).and_then(|t| t.parse::<u32>().ok());
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(se)) = (
        num(0..4),
        num(5..7),
        num(8..10),
        num(11..13),
        num(14..16),
        num(17..19),
    ) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d) && h < 24 && mi < 60 && se < 60
}

/// Whether js-yaml's default schema reads the plain scalar `s` as a
/// timestamp (YAML 1.1 `timestamp`): `YYYY-MM-DD`, or that followed by
/// `T`/`t`/spaces, `H?H:MM:SS`, an optional fraction and zone.
pub(crate) fn is_js_yaml_timestamp(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r)
            .is_some_and(|x| !x.is_empty() && x.iter().all(u8::is_ascii_digit))
    };
    // Date-only form: exactly YYYY-MM-DD.
    if b.len() == 10
        && digits(0..4)
        && b.get(4) == Some(&b'-')
        && digits(5..7)
        && b.get(7) == Some(&b'-')
        && digits(8..10)
    {
        return true;
    }
    // Date part with one- or two-digit month and day.
    let mut i = 0;
    let take = |i: &mut usize, min: usize, max: usize| -> bool {
        let start = *i;
        while *i < b.len() && *i - start < max && b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start >= min
    };
    let lit = |i: &mut usize, c: u8| -> bool {
        if b.get(*i) == Some(&c) {
            *i += 1;
            true
        } else {
            false
        }
    };
    if !(take(&mut i, 4, 4)
        && lit(&mut i, b'-')
        && take(&mut i, 1, 2)
        && lit(&mut i, b'-')
        && take(&mut i, 1, 2))
    {
        return false;
    }
    match b.get(i) {
        Some(b'T' | b't') => i += 1,
        Some(b' ' | b'\t') => {
            while matches!(b.get(i), Some(b' ' | b'\t')) {
                i += 1;
            }
        }
        _ => return false,
    }
    if !(take(&mut i, 1, 2)
        && lit(&mut i, b':')
        && take(&mut i, 2, 2)
        && lit(&mut i, b':')
        && take(&mut i, 2, 2))
    {
        return false;
    }
    if lit(&mut i, b'.') {
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
    }
    while matches!(b.get(i), Some(b' ' | b'\t')) {
        i += 1;
    }
    match b.get(i) {
        None => true,
        Some(b'Z') => i + 1 == b.len(),
        Some(b'+' | b'-') => {
            i += 1;
            if !take(&mut i, 1, 2) {
                return false;
            }
            if lit(&mut i, b':') && !take(&mut i, 2, 2) {
                return false;
            }
            i == b.len()
        }
        Some(_) => false,
    }
}

/// An IANA time zone name, looked up in the IANA database of `chrono-tz`
/// (names are case-sensitive there; the Hub's `Temporal` also accepts other
/// casings, so `europe/berlin` is refused here but not by the Hub). A
/// leading `+` or `-` (an offset) is refused, as the Hub does.
pub(crate) fn is_timezone(s: &str) -> bool {
    !s.starts_with(['+', '-']) && s.len() <= 64 && s.parse::<chrono_tz::Tz>().is_ok()
}

/// Checks one RRULE value; the error is the Hub's message.
pub(crate) fn check_rule(rule: &str) -> Result<(), &'static str> {
    if rule.is_empty() || rule.chars().count() > 2048 {
        return Err(RULE_SYNTAX);
    }
    let mut seen: Vec<(&str, &str)> = Vec::new();
    for part in rule.split(';') {
        let Some((k, v)) = part.split_once('=') else {
            return Err(RULE_SYNTAX);
        };
        let key_ok = !k.is_empty() && k.bytes().all(|c| c.is_ascii_uppercase());
        let value_ok = !v.is_empty()
            && v.bytes().all(|c| {
                c.is_ascii_uppercase() || c.is_ascii_digit() || matches!(c, b',' | b'+' | b'-')
            });
        if !key_ok || !value_ok || !RULE_KEYS.contains(&k) || seen.iter().any(|(s, _)| *s == k) {
            return Err(RULE_SYNTAX);
        }
        seen.push((k, v));
    }
    let get = |k: &str| seen.iter().find(|(s, _)| *s == k).map(|(_, v)| *v);
    if get("COUNT").is_some() && get("UNTIL").is_some() {
        return Err("Use COUNT or UNTIL, not both.");
    }
    for &(k, v) in &seen {
        check_value(k, v)?;
    }
    // rrule-temporal (strict) requires FREQ.
    if get("FREQ").is_none() {
        return Err(RULE_SYNTAX);
    }
    Ok(())
}

fn check_value(k: &str, v: &str) -> Result<(), &'static str> {
    let int = |s: &str| -> Option<i64> {
        let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
        if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        s.parse().ok()
    };
    let list_in = |lo: i64, hi: i64, signed: bool| {
        v.split(',').all(|p| {
            int(p).is_some_and(|n| {
                let m = if signed { n.abs() } else { n };
                (signed || !p.starts_with(['+', '-'])) && m >= lo && m <= hi
            })
        })
    };
    let ok = match k {
        "FREQ" => FREQS.contains(&v),
        "COUNT" => {
            return if int(v).is_some_and(|n| (1..=10_000).contains(&n))
                && !v.starts_with(['+', '-'])
            {
                Ok(())
            } else {
                Err("COUNT must be between 1 and 10000.")
            };
        }
        "UNTIL" => {
            let b = v.as_bytes();
            return if b.len() == 16
                && b.iter().enumerate().all(|(i, c)| match i {
                    8 => *c == b'T',
                    15 => *c == b'Z',
                    _ => c.is_ascii_digit(),
                }) {
                Ok(())
            } else {
                Err("UNTIL must be a UTC date-time, such as 20261231T235959Z.")
            };
        }
        "INTERVAL" => {
            int(v).is_some_and(|n| (1..=10_000).contains(&n)) && !v.starts_with(['+', '-'])
        }
        "BYSECOND" | "BYMINUTE" => list_in(0, 59, false),
        "BYHOUR" => list_in(0, 23, false),
        "BYMONTH" => list_in(1, 12, false),
        "BYMONTHDAY" => list_in(1, 31, true),
        "BYYEARDAY" | "BYSETPOS" => list_in(1, 366, true),
        "BYWEEKNO" => list_in(1, 53, true),
        "WKST" => WEEKDAYS.contains(&v),
        "BYDAY" => return check_byday(v),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(invalid_value_message(k))
    }
}

fn check_byday(v: &str) -> Result<(), &'static str> {
    for p in v.split(',') {
        let (num, day) = p.split_at(p.len().saturating_sub(2));
        if !WEEKDAYS.contains(&day) {
            return Err("Invalid BYDAY value.");
        }
        if num.is_empty() {
            continue;
        }
        let digits = num.strip_prefix(['+', '-']).unwrap_or(num);
        if digits.is_empty() || digits.len() > 6 || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return Err("Invalid BYDAY value.");
        }
        let n: i64 = digits.parse().map_err(|_| "Invalid BYDAY value.")?;
        if n == 0 || n > 53 {
            return Err("BYDAY ordinals must be between -53 and 53.");
        }
    }
    Ok(())
}

fn invalid_value_message(k: &str) -> &'static str {
    match k {
        "FREQ" => "Invalid FREQ value.",
        "INTERVAL" => "Invalid INTERVAL value.",
        "BYSECOND" => "Invalid BYSECOND value.",
        "BYMINUTE" => "Invalid BYMINUTE value.",
        "BYHOUR" => "Invalid BYHOUR value.",
        "BYMONTH" => "Invalid BYMONTH value.",
        "BYMONTHDAY" => "Invalid BYMONTHDAY value.",
        "BYYEARDAY" => "Invalid BYYEARDAY value.",
        "BYSETPOS" => "Invalid BYSETPOS value.",
        "BYWEEKNO" => "Invalid BYWEEKNO value.",
        "WKST" => "Invalid WKST value.",
        _ => RULE_SYNTAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules() {
        assert_eq!(check_rule("FREQ=DAILY;BYHOUR=9,17"), Ok(()));
        assert_eq!(check_rule("RRULE:FREQ=DAILY"), Err(RULE_SYNTAX));
        assert_eq!(check_rule("FREQ=DAILY;FREQ=DAILY"), Err(RULE_SYNTAX));
        assert_eq!(check_rule("FREQ=DAILY;FOO=1"), Err(RULE_SYNTAX));
        assert_eq!(
            check_rule("FREQ=HOURLY;COUNT=3;UNTIL=20261231T235959Z"),
            Err("Use COUNT or UNTIL, not both.")
        );
        assert_eq!(
            check_rule("FREQ=HOURLY;COUNT=0"),
            Err("COUNT must be between 1 and 10000.")
        );
        assert_eq!(check_rule("FREQ=HOURLY;COUNT=10000"), Ok(()));
        assert_eq!(
            check_rule("FREQ=HOURLY;UNTIL=20261231"),
            Err("UNTIL must be a UTC date-time, such as 20261231T235959Z.")
        );
        assert_eq!(
            check_rule("FREQ=DAILY;BYHOUR=25"),
            Err("Invalid BYHOUR value.")
        );
        assert_eq!(check_rule("FREQ=DAILY;BYHOUR=23"), Ok(()));
        assert_eq!(
            check_rule("FREQ=YEARLY;BYDAY=54MO"),
            Err("BYDAY ordinals must be between -53 and 53.")
        );
        assert_eq!(check_rule("FREQ=YEARLY;BYDAY=-53MO,+1FR,SU"), Ok(()));
        assert_eq!(check_rule("FREQ=MONTHLY;BYMONTHDAY=-31,1"), Ok(()));
        assert_eq!(
            check_rule("FREQ=MONTHLY;BYMONTHDAY=0"),
            Err("Invalid BYMONTHDAY value.")
        );
        assert_eq!(check_rule("BYHOUR=9"), Err(RULE_SYNTAX));
    }

    #[test]
    fn starts_and_zones() {
        assert!(is_local_start("2026-09-09T09:00:00"));
        assert!(!is_local_start("2026-02-30T09:00:00"));
        assert!(!is_local_start("2026-09-09 09:00:00"));
        assert!(is_js_yaml_timestamp("2026-09-09T09:00:00"));
        assert!(is_js_yaml_timestamp("2026-09-09"));
        assert!(is_js_yaml_timestamp("2026-9-9 9:00:00 +02:00"));
        assert!(!is_js_yaml_timestamp("tomorrow"));
        assert!(is_timezone("Europe/Berlin"));
        assert!(is_timezone("America/Argentina/Buenos_Aires"));
        assert!(is_timezone("UTC"));
        assert!(!is_timezone("+02:00"));
        assert!(!is_timezone("Mars/Olympus"));
        assert!(!is_timezone("Europe/Nowhere"));
        assert!(is_timezone("Etc/GMT+2"));
    }
}
