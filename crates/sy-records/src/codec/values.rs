//! How one record field is read from a cell ([`ReadCell`]) and written as one ([`WriteCell`]):
//! the value types of the record layout, and the file names of its enums.

use crate::codec::cells::Col;
use crate::record::{ErrorClass, Model, Phase, Status};

/// A field value read from a cell: `Ok(None)` for an empty cell, `Err` with the message of a
/// value that is not what the field needs.
pub(crate) trait ReadCell: Sized {
    fn read(col: &Col<'_>, i: usize) -> Result<Option<Self>, String>;
}

macro_rules! read_as {
    ($($t:ty => $method:ident),* $(,)?) => {
        $(impl ReadCell for $t {
            #[inline]
            fn read(col: &Col<'_>, i: usize) -> Result<Option<Self>, String> {
                col.$method(i)
            }
        })*
    };
}

read_as!(u32 => u32, u64 => u64, f64 => f64, bool => bool, String => str);

macro_rules! read_parsed {
    ($($t:ty => $parse:ident),* $(,)?) => {
        $(impl ReadCell for $t {
            #[inline]
            fn read(col: &Col<'_>, i: usize) -> Result<Option<Self>, String> {
                col.text(i)?.map(|s| $parse(s.trim())).transpose()
            }
        })*
    };
}

read_parsed!(
    Phase => parse_phase,
    Model => parse_role,
    Status => parse_status,
    ErrorClass => parse_error_class,
);

/// A field value as the cell of a written frame: numbers and booleans as they are, text and
/// enums as text.
pub(crate) trait WriteCell {
    type Out<'a>
    where
        Self: 'a;
    /// Whether the column holds text (else numbers or booleans).
    const TEXT: bool;
    fn cell(&self) -> Self::Out<'_>;
}

macro_rules! write_copied {
    ($($t:ty),* $(,)?) => {
        $(impl WriteCell for $t {
            type Out<'a> = $t where Self: 'a;
            const TEXT: bool = false;
            #[inline]
            fn cell(&self) -> $t {
                *self
            }
        })*
    };
}

write_copied!(
    u32,
    u64,
    f64,
    bool,
    Option<u32>,
    Option<u64>,
    Option<f64>,
    Option<bool>
);

macro_rules! write_text {
    ($($t:ty => $out:ty, |$v:ident| $e:expr);* $(;)?) => {
        $(impl WriteCell for $t {
            type Out<'a> = $out where Self: 'a;
            const TEXT: bool = true;
            #[inline]
            fn cell(&self) -> Self::Out<'_> {
                let $v = self;
                $e
            }
        })*
    };
}

write_text!(
    String => &'a str, |v| v.as_str();
    Option<String> => Option<&'a str>, |v| v.as_deref();
    Phase => &'static str, |v| v.as_str();
    Model => &'static str, |v| v.as_str();
    Status => &'static str, |v| status_str(*v);
    Option<ErrorClass> => Option<&'static str>, |v| v.map(error_class_str);
);

pub(crate) fn parse_phase(s: &str) -> Result<Phase, String> {
    match s {
        "qgrid" => Ok(Phase::Qgrid),
        "load" => Ok(Phase::Load),
        _ => Err(format!(
            "unknown phase {s:?}, expected \"qgrid\" or \"load\""
        )),
    }
}

pub(crate) fn parse_role(s: &str) -> Result<Model, String> {
    match s {
        "efficient" => Ok(Model::Efficient),
        "capable" => Ok(Model::Capable),
        _ => Err(format!(
            "unknown role {s:?}, expected \"efficient\" or \"capable\""
        )),
    }
}

pub(crate) fn parse_status(s: &str) -> Result<Status, String> {
    match s {
        "ok" => Ok(Status::Ok),
        "error" => Ok(Status::Error),
        _ => Err(format!(
            "unknown status {s:?}, expected \"ok\" or \"error\""
        )),
    }
}

fn parse_error_class(s: &str) -> Result<ErrorClass, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("unknown error class {s:?}"))
}

fn status_str(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Error => "error",
    }
}

fn error_class_str(e: ErrorClass) -> &'static str {
    match e {
        ErrorClass::Connect => "connect",
        ErrorClass::Timeout => "timeout",
        ErrorClass::Http4xx => "http4xx",
        ErrorClass::Http5xx => "http5xx",
        ErrorClass::StreamError => "stream_error",
        ErrorClass::StreamDropped => "stream_dropped",
        ErrorClass::NoContent => "no_content",
        ErrorClass::Reservation => "reservation",
        ErrorClass::Observation => "observation",
        ErrorClass::Cancelled => "cancelled",
        ErrorClass::Protocol => "protocol",
        ErrorClass::Configuration => "configuration",
        ErrorClass::ServedElsewhere => "served_elsewhere",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_class_names_match_serde() {
        for e in [
            ErrorClass::Connect,
            ErrorClass::Timeout,
            ErrorClass::Http4xx,
            ErrorClass::Http5xx,
            ErrorClass::StreamError,
            ErrorClass::StreamDropped,
            ErrorClass::NoContent,
            ErrorClass::Reservation,
            ErrorClass::Observation,
            ErrorClass::Cancelled,
            ErrorClass::Protocol,
            ErrorClass::Configuration,
            ErrorClass::ServedElsewhere,
        ] {
            let json = serde_json::to_value(e).unwrap();
            assert_eq!(json.as_str().unwrap(), error_class_str(e));
            assert_eq!(parse_error_class(error_class_str(e)).unwrap(), e);
        }
    }
}
