//! The deformation grid's lines: contours of a plane's sampling coordinates at multiples of the
//! grid step, by marching squares, joined into polylines.

use std::collections::HashMap;

/// At most this many grid levels are contoured through one cell (a folded cell may span many).
const MAX_LEVELS_PER_CELL: i64 = 16;

/// The polylines where `f` (`h` rows of `w` values, the value of texel `(c, r)` at its centre
/// `(c + 0.5, r + 0.5)`) equals a multiple of `step` within `range` (inclusive): marching
/// squares (a corner counts as above a level it equals; a saddle is split by the cell's mean),
/// segments joined into polylines in texel coordinates `[x, y]`.
pub fn contours(f: &[f32], w: usize, h: usize, step: f32, range: (f32, f32)) -> Vec<Vec<[f32; 2]>> {
    if w < 2 || h < 2 || f.len() < w * h || step <= 0.0 {
        return vec![];
    }
    // Edge ids: horizontal (r, c)-(r, c+1) first, then vertical (r, c)-(r+1, c).
    let nh = h * (w - 1);
    let hedge = |r: usize, c: usize| (r * (w - 1) + c) as u32;
    let vedge = |r: usize, c: usize| (nh + r * w + c) as u32;
    let at = |r: usize, c: usize| f[r * w + c];
    let pos = |r: usize, c: usize| [c as f32 + 0.5, r as f32 + 0.5];
    type Key = (i64, u32);
    let mut points: HashMap<Key, [f32; 2]> = HashMap::new();
    let mut segs: Vec<(Key, Key)> = vec![];
    for r in 0..h - 1 {
        for c in 0..w - 1 {
            let corners = [(r, c), (r, c + 1), (r + 1, c + 1), (r + 1, c)];
            let v = corners.map(|(rr, cc)| at(rr, cc));
            if v.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let lo = v.iter().copied().fold(f32::INFINITY, f32::min);
            let hi = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let k0 = (lo.max(range.0) / step).ceil() as i64;
            let k1 = ((hi.min(range.1) / step).floor() as i64).min(k0 + MAX_LEVELS_PER_CELL - 1);
            // Edges: top (0-1), right (1-2), bottom (3-2), left (0-3).
            let edges = [
                (0usize, 1usize, hedge(r, c)),
                (1, 2, vedge(r, c + 1)),
                (3, 2, hedge(r + 1, c)),
                (0, 3, vedge(r, c)),
            ];
            for k in k0..=k1 {
                let level = k as f32 * step;
                let above = v.map(|x| x >= level);
                let mut crossed: Vec<usize> = vec![];
                for (e, &(a, b, id)) in edges.iter().enumerate() {
                    if above[a] != above[b] {
                        crossed.push(e);
                        points.entry((k, id)).or_insert_with(|| {
                            let (pa, pb) = (
                                pos(corners[a].0, corners[a].1),
                                pos(corners[b].0, corners[b].1),
                            );
                            let t = ((level - v[a]) / (v[b] - v[a])).clamp(0.0, 1.0);
                            [pa[0] + t * (pb[0] - pa[0]), pa[1] + t * (pb[1] - pa[1])]
                        });
                    }
                }
                let key = |e: usize| (k, edges[e].2);
                match crossed.len() {
                    2 => segs.push((key(crossed[0]), key(crossed[1]))),
                    4 => {
                        // The corners on the other side than the centre are cut off, each by
                        // the segment between its two edges.
                        let centre = v.iter().sum::<f32>() / 4.0 >= level;
                        // Corner -> its two edges: 0 top+left, 1 top+right, 2 right+bottom,
                        // 3 bottom+left.
                        let around = [(0, 3), (0, 1), (1, 2), (2, 3)];
                        for (corner, &(e0, e1)) in around.iter().enumerate() {
                            if above[corner] != centre {
                                segs.push((key(e0), key(e1)));
                            }
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    // Join segments that share an end point (at most two per point).
    let mut ends: HashMap<Key, Vec<usize>> = HashMap::new();
    for (i, (a, b)) in segs.iter().enumerate() {
        ends.entry(*a).or_default().push(i);
        ends.entry(*b).or_default().push(i);
    }
    let mut used = vec![false; segs.len()];
    let mut lines = vec![];
    for start in 0..segs.len() {
        if used[start] {
            continue;
        }
        used[start] = true;
        let (a, b) = segs[start];
        let walk = |from: Key, used: &mut Vec<bool>| {
            let mut out = vec![];
            let mut cur = from;
            while let Some(&next) = ends.get(&cur).and_then(|v| v.iter().find(|&&s| !used[s])) {
                used[next] = true;
                let (p, q) = segs[next];
                cur = if p == cur { q } else { p };
                out.push(cur);
            }
            out
        };
        let forward = walk(b, &mut used);
        let backward = walk(a, &mut used);
        let keys: Vec<Key> = backward
            .into_iter()
            .rev()
            .chain([a, b])
            .chain(forward)
            .collect();
        lines.push(keys.iter().filter_map(|k| points.get(k).copied()).collect());
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contours_of_a_ramp_are_straight_lines() {
        // f = column index: levels 8 and 16 cross at the texel centres 8.5 and 16.5 (level 0
        // equals the first column, which counts as above it: no crossing); 24 is out of range.
        let (w, h) = (30, 5);
        let f: Vec<f32> = (0..w * h).map(|i| (i % w) as f32).collect();
        let lines = contours(&f, w, h, 8.0, (0.0, 20.0));
        let mut xs: Vec<f32> = lines.iter().map(|l| l[0][0]).collect();
        xs.sort_by(f32::total_cmp);
        assert_eq!(xs, [8.5, 16.5]);
        for l in &lines {
            assert_eq!(l.len(), h);
            assert!(l.iter().all(|p| p[0] == l[0][0]));
            assert_eq!(
                (l[0][1].min(l[h - 1][1]), l[0][1].max(l[h - 1][1])),
                (0.5, 4.5)
            );
        }
    }

    #[test]
    fn a_closed_contour_closes() {
        // A bump: one level circles the centre.
        let (w, h) = (11, 11);
        let f: Vec<f32> = (0..w * h)
            .map(|i| {
                let (x, y) = ((i % w) as f32 - 5.0, (i / w) as f32 - 5.0);
                20.0 - (x * x + y * y)
            })
            .collect();
        let lines = contours(&f, w, h, 8.0, (-100.0, 100.0));
        // Levels 0, 8 and 16 circle the centre (radius < 5); -8 and below reach the border.
        let closed = lines
            .iter()
            .filter(|l| l.first() == l.last() && l.len() > 3)
            .count();
        assert_eq!(closed, 3, "{lines:?}");
    }
}
