//! Label maps whose values f32 cannot hold exactly.
//!
//! The engines compute in f32, which holds every integer of magnitude up to 2^24 exactly and
//! rounds larger ones (16777217 becomes 16777216). A label map only ever has its values copied
//! (order 0, background 0), so such a map goes through the engines as *codes*: small integers
//! 0, 1, 2, … that index a table of the exact values. Code 0 is always the value 0, the
//! background that order-0 resampling writes outside the grid. The writers (and the Python
//! package) turn the codes back into the exact values.

/// The largest magnitude up to which every integer is exact in f32.
pub const F32_EXACT: i128 = 1 << 24;

/// The exact values of a label map carried as codes: `values[code]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelValues {
    values: Vec<i128>,
}

impl LabelValues {
    /// Codes for `values` when some are beyond [`F32_EXACT`] (`None` when f32 holds every one
    /// exactly, so the map needs no table). An error when the map has more distinct values than
    /// f32 can number exactly.
    pub fn encode(values: &[i128]) -> Result<Option<(LabelValues, Vec<f32>)>, String> {
        if values.iter().all(|v| v.abs() <= F32_EXACT) {
            return Ok(None);
        }
        // The values other than the background, sorted; code 0 is the background value 0.
        let mut rest: Vec<i128> = values.iter().copied().filter(|&v| v != 0).collect();
        rest.sort_unstable();
        rest.dedup();
        if rest.len() as i128 >= F32_EXACT {
            return Err(format!(
                "the label map has {} distinct values; at most {F32_EXACT} can be carried exactly",
                rest.len() + 1
            ));
        }
        let code_of = |v: &i128| -> f32 {
            match rest.binary_search(v) {
                Ok(i) if *v != 0 => (i + 1) as f32,
                _ => 0.0,
            }
        };
        let codes = values.iter().map(code_of).collect();
        let mut table = Vec::with_capacity(rest.len() + 1);
        table.push(0);
        table.extend(rest);
        Ok(Some((LabelValues { values: table }, codes)))
    }

    /// The exact value of `code` (a code the engines copied; anything else reads as 0).
    pub fn value(&self, code: f32) -> i128 {
        if code.is_nan() || code < 0.0 || code.fract() != 0.0 {
            return 0;
        }
        self.values.get(code as usize).copied().unwrap_or(0)
    }

    /// The exact values of `codes`.
    pub fn decode(&self, codes: &[f32]) -> Vec<i128> {
        codes.iter().map(|&c| self.value(c)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_need_no_table() {
        assert_eq!(LabelValues::encode(&[0, 1, -5, 1 << 24]).unwrap(), None);
    }

    #[test]
    fn large_values_round_trip_exactly() {
        let vals: Vec<i128> = vec![
            16_777_217,
            0,
            123_456_789,
            -16_777_219,
            7,
            i64::MAX as i128,
            u64::MAX as i128,
            i64::MIN as i128,
            16_777_217,
        ];
        let (t, codes) = LabelValues::encode(&vals).unwrap().unwrap();
        assert_eq!(t.decode(&codes), vals);
        // Every code is an integer f32 holds exactly, and 0 stays code 0 (the background).
        assert!(
            codes
                .iter()
                .all(|&c| c.fract() == 0.0 && c < F32_EXACT as f32)
        );
        assert_eq!(codes[1], 0.0);
        assert_eq!(t.value(0.0), 0);
        // Distinct values get distinct codes.
        assert_ne!(codes[0], codes[2]);
        assert_eq!(codes[0], codes[8]);
        // Without a 0 in the map, code 0 is still the background.
        let (t, codes) = LabelValues::encode(&[1 << 30, 3]).unwrap().unwrap();
        assert_eq!(t.decode(&codes), vec![1 << 30, 3]);
        assert!(codes.iter().all(|&c| c != 0.0));
        assert_eq!(t.value(0.0), 0);
    }

    #[test]
    fn codes_out_of_the_table_read_as_background() {
        let (t, _) = LabelValues::encode(&[1 << 25]).unwrap().unwrap();
        for c in [f32::NAN, -1.0, 0.5, 1e9] {
            assert_eq!(t.value(c), 0);
        }
    }
}
