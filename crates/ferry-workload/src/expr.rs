//! Small bounded integer expressions: integers, parameters, loop variables, `+ - * / %`,
//! parentheses, `min(a, b)`, `max(a, b)`. At most [`MAX_EXPR_CHARS`] characters and
//! [`MAX_NESTING`] nested parentheses (the parser recurses once per level, so the depth is
//! bounded before it recurses); a sub-expression without loop variables folds to a constant.
use ferry_runtime::device::workload as w;

/// Longest expression source.
pub const MAX_EXPR_CHARS: usize = 200;
/// Deepest parenthesis / call nesting.
pub const MAX_NESTING: usize = 8;

/// A parsed expression.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Expr {
    Const(u64),
    Var(u32),
    Bin(u32, Box<Expr>, Box<Expr>),
}

/// Names an expression can use: parameters (constants) and the loop variables in scope
/// (`(name, slot)`).
pub(crate) struct Scope<'a> {
    pub(crate) params: &'a dyn Fn(&str) -> Option<u64>,
    pub(crate) vars: &'a [(String, u32)],
}

struct P<'a> {
    s: &'a [u8],
    i: usize,
    scope: &'a Scope<'a>,
}

impl P<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }

    fn expect(&mut self, c: u8) -> Result<(), String> {
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            Err(format!("expected `{}` at character {}", c as char, self.i + 1))
        }
    }

    fn sum(&mut self, depth: usize) -> Result<Expr, String> {
        let mut a = self.product(depth)?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            let b = self.product(depth)?;
            a = fold(if c == b'+' { w::E_ADD } else { w::E_SUB }, a, b)?;
        }
        Ok(a)
    }

    fn product(&mut self, depth: usize) -> Result<Expr, String> {
        let mut a = self.atom(depth)?;
        while let Some(c @ (b'*' | b'/' | b'%')) = self.peek() {
            self.i += 1;
            let b = self.atom(depth)?;
            let op = match c {
                b'*' => w::E_MUL,
                b'/' => w::E_DIV,
                _ => w::E_MOD,
            };
            a = fold(op, a, b)?;
        }
        Ok(a)
    }

    fn atom(&mut self, depth: usize) -> Result<Expr, String> {
        if depth >= MAX_NESTING {
            return Err(format!("nested deeper than {MAX_NESTING} levels"));
        }
        match self.peek() {
            Some(b'(') => {
                self.i += 1;
                let e = self.sum(depth + 1)?;
                self.expect(b')')?;
                Ok(e)
            }
            Some(c) if c.is_ascii_digit() => {
                let st = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_digit() || self.s[self.i] == b'_')
                {
                    self.i += 1;
                }
                let t: String = String::from_utf8_lossy(&self.s[st..self.i])
                    .chars()
                    .filter(|&c| c != '_')
                    .collect();
                t.parse().map(Expr::Const).map_err(|_| format!("integer `{t}` is too large"))
            }
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let st = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || self.s[self.i] == b'_')
                {
                    self.i += 1;
                }
                let name = String::from_utf8_lossy(&self.s[st..self.i]).into_owned();
                if (name == "min" || name == "max") && self.peek() == Some(b'(') {
                    self.i += 1;
                    let a = self.sum(depth + 1)?;
                    self.expect(b',')?;
                    let b = self.sum(depth + 1)?;
                    self.expect(b')')?;
                    return fold(if name == "min" { w::E_MIN } else { w::E_MAX }, a, b);
                }
                if let Some(&(_, slot)) = self.scope.vars.iter().rev().find(|(n, _)| *n == name) {
                    return Ok(Expr::Var(slot));
                }
                (self.scope.params)(&name).map(Expr::Const).ok_or_else(|| {
                    format!("unknown name `{name}` (not a parameter or loop variable in scope)")
                })
            }
            Some(c) => Err(format!("unexpected `{}` at character {}", c as char, self.i + 1)),
            None => Err("unexpected end of expression".into()),
        }
    }
}

fn fold(op: u32, a: Expr, b: Expr) -> Result<Expr, String> {
    if let (Expr::Const(x), Expr::Const(y)) = (&a, &b) {
        let (x, y) = (*x, *y);
        return w::apply(op, x, y).map(Expr::Const).ok_or_else(|| {
            format!("constant arithmetic overflows, goes below zero or divides by zero ({x}, {y})")
        });
    }
    Ok(Expr::Bin(op, Box::new(a), Box::new(b)))
}

/// Parses `src` in `scope`.
pub(crate) fn parse(src: &str, scope: &Scope<'_>) -> Result<Expr, String> {
    if src.len() > MAX_EXPR_CHARS {
        return Err(format!("expression longer than {MAX_EXPR_CHARS} characters"));
    }
    let mut p = P { s: src.as_bytes(), i: 0, scope };
    let e = p.sum(0)?;
    if let Some(c) = p.peek() {
        return Err(format!("unexpected `{}` at character {}", c as char, p.i + 1));
    }
    Ok(e)
}

impl Expr {
    /// Evaluates with loop variable values `vars` (by slot).
    pub(crate) fn eval(&self, vars: &[u64]) -> Option<u64> {
        match self {
            Expr::Const(c) => Some(*c),
            Expr::Var(s) => vars.get(*s as usize).copied(),
            Expr::Bin(op, a, b) => w::apply(*op, a.eval(vars)?, b.eval(vars)?),
        }
    }

    /// The constant value, when it uses no loop variable.
    pub(crate) fn constant(&self) -> Option<u64> {
        match self {
            Expr::Const(c) => Some(*c),
            _ => None,
        }
    }

    /// Reverse-Polish code (the interpreter's expression words, without the length word).
    pub(crate) fn emit(&self, out: &mut Vec<u32>) {
        match self {
            Expr::Const(c) => out.extend([w::E_CONST, *c as u32, (*c >> 32) as u32]),
            Expr::Var(s) => out.extend([w::E_VAR, *s]),
            Expr::Bin(op, a, b) => {
                a.emit(out);
                b.emit(out);
                out.push(*op);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(src: &str, vars: &[u64]) -> Result<Option<u64>, String> {
        let params = |p: &str| (p == "n").then_some(10);
        let v = vec![("i".to_string(), 0), ("j".to_string(), 1)];
        let scope = Scope { params: &params, vars: &v };
        parse(src, &scope).map(|e| e.eval(vars))
    }

    #[test]
    fn precedence_calls_and_folding() {
        assert_eq!(eval("1 + 2 * 3", &[]), Ok(Some(7)));
        assert_eq!(eval("(1 + 2) * 3", &[]), Ok(Some(9)));
        assert_eq!(eval("n - 2 - 3", &[]), Ok(Some(5)), "left associative");
        assert_eq!(eval("min(n, 4) + max(1, 2) % 2", &[]), Ok(Some(4)));
        assert_eq!(eval("i * n + j", &[3, 4]), Ok(Some(34)));
        assert_eq!(eval("1_000 / 3", &[]), Ok(Some(333)));
        let params = |_: &str| None;
        let scope = Scope { params: &params, vars: &[] };
        assert_eq!(parse("2 * (3 + 4)", &scope), Ok(Expr::Const(14)), "constants fold");
    }

    #[test]
    fn refusals() {
        assert!(eval("n - 11", &[]).unwrap_err().contains("below zero"));
        assert!(eval("1 / 0", &[]).unwrap_err().contains("divides by zero"));
        assert!(eval("k", &[]).unwrap_err().contains("unknown name `k`"));
        assert!(eval("1 +", &[]).unwrap_err().contains("end of expression"));
        assert!(eval("1 2", &[]).unwrap_err().contains("unexpected `2`"));
        assert!(eval("99999999999999999999", &[]).unwrap_err().contains("too large"));
        assert!(eval(&"(".repeat(9), &[]).unwrap_err().contains("nested deeper"));
        assert!(eval(&"1+".repeat(150), &[]).unwrap_err().contains("longer than"));
        // A variable's value at run time: overflow is None (an error for the task).
        assert_eq!(eval("i - 1", &[0]), Ok(None));
    }
}
