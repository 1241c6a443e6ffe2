//! Python's `repr(float)`, used for the `Reward:` lines of the prompt (`docs/ragen-semantics.md` §3:
//! RAGEN prints rewards with `str(float)`, e.g. `-0.1`, `10.7`, `-0.30000000000000004`, `1.0`).

/// Format `x` like Python's `repr(x)`: the shortest round-trip digits, `.0` for integral values,
/// scientific notation when the decimal exponent is below -4 or at least 16, `inf`/`nan`.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf".into() } else { "-inf".into() };
    }
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`.
    let sci = format!("{x:e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` always has an exponent");
    let exp: i32 = exp.parse().expect("integer exponent");
    if (-4..16).contains(&exp) {
        let s = format!("{x}");
        if s.contains('.') { s } else { format!("{s}.0") }
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::py_float_repr;

    #[test]
    fn matches_python_repr() {
        // Values checked against CPython 3.12 `repr`.
        let cases = [
            (-0.1, "-0.1"),
            (10.7, "10.7"),
            (-0.1 + -0.1 + -0.1, "-0.30000000000000004"),
            (1.0, "1.0"),
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (100.0, "100.0"),
            (1e16, "1e+16"),
            (1.5e-5, "1.5e-05"),
            (0.0001, "0.0001"),
            (123456789012345.0, "123456789012345.0"),
            (f64::INFINITY, "inf"),
        ];
        for (x, want) in cases {
            assert_eq!(py_float_repr(x), want, "repr({x:?})");
        }
    }
}
