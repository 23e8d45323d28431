//! Typed N-d views of a view kernel's task: the element views the file writes, lowered to the
//! word ranges the runtime moves and the layout scalars the kernel reads
//! (`ferry_abi::layout`).
//!
//! A view kernel's argument is either *flat* (`offset`, `len`: a contiguous run of elements) or
//! *N-d* (`offset`, `shape`, optional `strides`, default row-major contiguous). Every argument of
//! one task has the same shape (checked per expanded task, with the argument's line). Its range
//! on the device starts at its first element, which must start a 32-bit word (`offset × size` a
//! multiple of 4), and spans [`extent`](ferry_abi::layout::extent) elements, rounded up to whole
//! words; an output view must not reach one element twice.
use crate::compile::{stack_need, ArgNode, Ctx, ScalarNode};
use crate::error::WorkloadError;
use crate::expr::Expr;
use crate::schema::ArgDecl;
use ferry_abi::layout;
use ferry_abi::records::DType;
use ferry_runtime::device::workload as w;
use toml::Spanned;

/// How a view kernel's argument lays out its elements.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Form {
    /// Contiguous elements: `len` (`None`: to the end of a run tensor of `elems` elements).
    Flat(Option<Expr>),
    /// A constant shape and strides.
    Nd {
        /// Dimensions, outermost first.
        shape: Vec<u64>,
        /// Strides in elements.
        strides: Vec<u64>,
    },
}

/// One argument's element view, as the file states it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ElemView {
    /// The tensor's dtype.
    pub(crate) dtype: DType,
    /// First element.
    pub(crate) offset: Expr,
    /// Its layout.
    pub(crate) form: Form,
}

impl ElemView {
    /// The shape and extent (elements from the first to the last, both included) at `off` of a
    /// tensor of `elems` elements, with `len` the flat length already evaluated.
    pub(crate) fn shape_extent(&self, off: u64, len: Option<u64>, elems: u64) -> (Vec<u64>, u64) {
        match &self.form {
            Form::Flat(_) => {
                let n = len.unwrap_or(elems.saturating_sub(off));
                (vec![n], n)
            }
            Form::Nd { shape, strides } => {
                (shape.clone(), layout::extent(shape, strides).unwrap_or(u64::MAX))
            }
        }
    }
}

fn bin(op: u32, a: Expr, b: Expr) -> Expr {
    match (&a, &b) {
        (Expr::Const(x), Expr::Const(y)) => match w::apply(op, *x, *y) {
            Some(v) => Expr::Const(v),
            None => Expr::Bin(op, Box::new(a), Box::new(b)),
        },
        _ => Expr::Bin(op, Box::new(a), Box::new(b)),
    }
}

/// Whether a view of `shape` with `strides` reaches some element twice.
pub(crate) fn self_overlaps(shape: &[u64], strides: &[u64]) -> bool {
    let mut dims: Vec<(u64, u64)> =
        shape.iter().zip(strides).filter(|(&d, _)| d > 1).map(|(&d, &s)| (s, d)).collect();
    dims.sort_unstable();
    let mut span = 1u64;
    for (s, d) in dims {
        if s < span {
            return true;
        }
        span = span.saturating_add((d - 1).saturating_mul(s));
    }
    false
}

fn constants(
    ctx: &Ctx<'_>,
    list: &Spanned<Vec<Spanned<crate::schema::Num>>>,
    what: &str,
) -> Result<Vec<u64>, WorkloadError> {
    list.get_ref().iter().map(|n| ctx.constant(n, what)).collect()
}

/// Lowers the arguments of view kernel task `label`: each [`ArgNode`]'s `offset` and `len`
/// become word expressions and its element view is kept in `elem`; returns the layout scalars
/// (the shape word from the first argument, then each argument's operand word).
///
/// # Errors
/// A `shape` or `strides` that is not a view (no dimension, more than four, a zero dimension,
/// strides of another count, a field too wide for the rank), an output that reaches an element
/// twice, `len` beside `shape`, a scratch tensor without `len` or `shape`, or a word expression
/// too long for the interpreter; each names the argument's line.
pub(crate) fn lower(
    ctx: &Ctx<'_>,
    label: &str,
    args: &mut [ArgNode],
    decls: &[Spanned<ArgDecl>],
    run_types: &[(DType, u64)],
    reduce: Option<usize>,
) -> Result<Vec<ScalarNode>, WorkloadError> {
    let mut words = Vec::with_capacity(args.len());
    let mut shape_word = None;
    for (a, d) in args.iter_mut().zip(decls) {
        let at = d.span().start;
        let err =
            |m: String| ctx.lines.at(at, format!("task '{label}': argument `{}`: {m}", a.name));
        let decl = d.get_ref();
        let (dtype, elems) = match a.tensor {
            crate::compile::TRef::Run(i) => {
                let (t, n) = run_types[i as usize];
                (t, Some(n))
            }
            crate::compile::TRef::Scratch(_) => (DType::Float32, None),
        };
        let size = dtype.size() as u64;
        let form = match (&decl.shape, &decl.strides) {
            (None, Some(_)) => return Err(err("`strides` needs a `shape`".into())),
            (None, None) if reduce.is_some() => {
                return Err(err("this kernel's views need `shape` ([M, K, N])".into()))
            }
            (None, None) => {
                if a.len.is_none() && elems.is_none() {
                    return Err(err("a scratch tensor's view needs `len` or `shape`".into()));
                }
                Form::Flat(a.len.clone())
            }
            (Some(shape), strides) => {
                if a.len.is_some() {
                    return Err(err("a view has `len` or `shape`, not both".into()));
                }
                let shape = constants(ctx, shape, "shape")?;
                if shape.is_empty() || shape.len() > layout::MAX_VIEW_DIMS || shape.contains(&0) {
                    return Err(err(format!(
                        "shape {shape:?}: a view has 1..={} dimensions, each at least 1",
                        layout::MAX_VIEW_DIMS
                    )));
                }
                let strides = match strides {
                    Some(s) => constants(ctx, s, "strides")?,
                    None => {
                        let mut st = vec![1u64; shape.len()];
                        for k in (0..shape.len() - 1).rev() {
                            st[k] = st[k + 1].saturating_mul(shape[k + 1]);
                        }
                        st
                    }
                };
                if strides.len() != shape.len() {
                    return Err(err(format!(
                        "{} strides for the {} dimensions of shape {shape:?}",
                        strides.len(),
                        shape.len()
                    )));
                }
                if let Some(ax) = reduce {
                    if shape.len() != 3 || (a.role.writes() && strides.get(ax) != Some(&0)) {
                        return Err(err(format!(
                            "shape {shape:?}, strides {strides:?}: this kernel's views are [M, K, N], its output's stride on K is 0"
                        )));
                    }
                }
                let (mut os, mut ot) = (shape.clone(), strides.clone());
                if let Some(ax) = reduce.filter(|_| a.role.writes()) {
                    // The output is written once per (m, n): the reduced dimension aside.
                    os.remove(ax);
                    ot.remove(ax);
                }
                if a.role.writes() && self_overlaps(&os, &ot) {
                    return Err(err(format!(
                        "an output view reaches an element twice (shape {shape:?}, strides {strides:?})"
                    )));
                }
                Form::Nd { shape, strides }
            }
        };
        let strides1 = [1u64];
        let (shape_e, strides): (Expr, &[u64]) = match &form {
            Form::Flat(len) => {
                let len = match len {
                    Some(l) => l.clone(),
                    None => bin(w::E_SUB, Expr::Const(elems.unwrap_or(0)), a.offset.clone()),
                };
                (bin(w::E_MUL, len, Expr::Const(4)), &strides1)
            }
            Form::Nd { shape, strides } => {
                let s = layout::encode_shape(shape).map_err(|e| err(e.to_string()))?;
                (Expr::Const(s), strides)
            }
        };
        let op = layout::encode_operand(dtype, strides).map_err(|e| err(e.to_string()))?;
        shape_word.get_or_insert(shape_e);
        words.push(ScalarNode::U64(Expr::Const(op)));
        // The word range: from the first element's word, enough words for the extent.
        let off_w =
            bin(w::E_DIV, bin(w::E_MUL, a.offset.clone(), Expr::Const(size)), Expr::Const(4));
        let len_w = match &form {
            Form::Flat(Some(l)) => Some(bin(
                w::E_DIV,
                bin(w::E_ADD, bin(w::E_MUL, l.clone(), Expr::Const(size)), Expr::Const(3)),
                Expr::Const(4),
            )),
            Form::Flat(None) => None,
            Form::Nd { shape, strides } => {
                let e = layout::extent(shape, strides)
                    .and_then(|e| e.checked_mul(size))
                    .ok_or_else(|| err("the view's extent overflows".into()))?;
                Some(Expr::Const(e.div_ceil(4)))
            }
        };
        for e in std::iter::once(&off_w).chain(len_w.as_ref()) {
            let mut code = Vec::new();
            e.emit(&mut code);
            if code.len() > w::MAX_EXPR_WORDS as usize || stack_need(e) > w::MAX_STACK {
                return Err(err(
                    "its offset or length is too long an expression once scaled to words".into(),
                ));
            }
        }
        a.elem = Some(ElemView { dtype, offset: std::mem::replace(&mut a.offset, off_w), form });
        a.len = len_w;
    }
    let mut out = Vec::with_capacity(1 + words.len());
    out.push(ScalarNode::U64(shape_word.unwrap_or(Expr::Const(0))));
    out.extend(words);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlap_of_output_views() {
        assert!(!self_overlaps(&[3, 4], &[4, 1]));
        assert!(!self_overlaps(&[3, 4], &[8, 1]), "gaps are fine");
        assert!(!self_overlaps(&[4, 3], &[1, 4]), "a transpose");
        assert!(self_overlaps(&[3, 4], &[3, 1]), "rows overlap by one");
        assert!(self_overlaps(&[2, 4], &[0, 1]), "broadcast");
        assert!(!self_overlaps(&[1, 4], &[0, 1]), "a dimension of 1 never repeats");
    }
}
