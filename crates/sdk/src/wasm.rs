//! A minimal reader of WebAssembly modules: imports, exports, function types, memories and
//! globals. Enough to check a graft against the ABI (and to describe one) without an engine; the
//! kernel's loader does the real validation.

use std::fmt;

/// `\0asm`.
pub const MAGIC: [u8; 4] = *b"\0asm";

/// A value type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValType {
    I32,
    I64,
    F32,
    F64,
    V128,
    /// A reference type, by its type code.
    Ref(u8),
}

impl fmt::Display for ValType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValType::I32 => f.write_str("i32"),
            ValType::I64 => f.write_str("i64"),
            ValType::F32 => f.write_str("f32"),
            ValType::F64 => f.write_str("f64"),
            ValType::V128 => f.write_str("v128"),
            ValType::Ref(c) => write!(f, "ref(0x{c:02x})"),
        }
    }
}

/// A function type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncType {
    pub params: Vec<ValType>,
    pub results: Vec<ValType>,
}

impl fmt::Display for FuncType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[ValType]| v.iter().map(|t| t.to_string()).collect::<Vec<_>>().join(", ");
        write!(f, "({}) -> ({})", list(&self.params), list(&self.results))
    }
}

/// What an import or export is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExternKind {
    Func,
    Table,
    Memory,
    Global,
    Tag,
}

impl fmt::Display for ExternKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ExternKind::Func => "func",
            ExternKind::Table => "table",
            ExternKind::Memory => "memory",
            ExternKind::Global => "global",
            ExternKind::Tag => "tag",
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Import {
    pub module: String,
    pub name: String,
    pub kind: ExternKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Export {
    pub name: String,
    pub kind: ExternKind,
    /// Index in the kind's index space (imports first).
    pub index: u32,
}

/// A memory's limits, in 64 KiB pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    pub initial: u64,
    pub maximum: Option<u64>,
}

/// A global defined (not imported) by the module.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Global {
    pub ty: ValType,
    pub mutable: bool,
    /// The initial value when the initialiser is a plain `i32.const`/`i64.const`.
    pub init: Option<i64>,
}

/// What [`parse`] found.
#[derive(Debug, Clone, Default)]
pub struct ModuleInfo {
    pub types: Vec<FuncType>,
    pub imports: Vec<Import>,
    pub exports: Vec<Export>,
    /// Type index of every function, imported ones first.
    pub func_types: Vec<u32>,
    /// Defined memories (imported memories are not listed).
    pub memories: Vec<Memory>,
    /// Defined globals; `imported_globals` of them come before these in the index space.
    pub globals: Vec<Global>,
    pub imported_globals: u32,
}

impl ModuleInfo {
    pub fn export(&self, name: &str) -> Option<&Export> {
        self.exports.iter().find(|e| e.name == name)
    }

    /// The type of the exported function `name`.
    pub fn export_func_type(&self, name: &str) -> Option<&FuncType> {
        let e = self.export(name).filter(|e| e.kind == ExternKind::Func)?;
        let ty = *self.func_types.get(e.index as usize)?;
        self.types.get(ty as usize)
    }

    /// The exported global `name`, if the module defines it.
    pub fn export_global(&self, name: &str) -> Option<&Global> {
        let e = self.export(name).filter(|e| e.kind == ExternKind::Global)?;
        self.globals.get(e.index.checked_sub(self.imported_globals)? as usize)
    }
}

/// A module the reader cannot make sense of.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed WebAssembly module at byte {offset}: {what}")]
pub struct ParseError {
    pub offset: usize,
    pub what: &'static str,
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn err(&self, what: &'static str) -> ParseError {
        ParseError { offset: self.pos, what }
    }

    fn byte(&mut self) -> Result<u8, ParseError> {
        let b = *self.bytes.get(self.pos).ok_or_else(|| self.err("unexpected end"))?;
        self.pos += 1;
        Ok(b)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], ParseError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| self.err("unexpected end"))?;
        let s = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(s)
    }

    fn uleb(&mut self) -> Result<u64, ParseError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.err("LEB128 too long"))
    }

    fn u32(&mut self) -> Result<u32, ParseError> {
        u32::try_from(self.uleb()?).map_err(|_| self.err("u32 out of range"))
    }

    fn sleb(&mut self) -> Result<i64, ParseError> {
        let mut v = 0i64;
        let mut shift = 0;
        loop {
            let b = self.byte()?;
            v |= i64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                if shift < 64 && b & 0x40 != 0 {
                    v |= -1i64 << shift;
                }
                return Ok(v);
            }
            if shift >= 70 {
                return Err(self.err("LEB128 too long"));
            }
        }
    }

    fn name(&mut self) -> Result<String, ParseError> {
        let n = self.u32()? as usize;
        let s = self.take(n)?;
        String::from_utf8(s.to_vec()).map_err(|_| self.err("name is not UTF-8"))
    }

    fn valtype(&mut self) -> Result<ValType, ParseError> {
        Ok(match self.byte()? {
            0x7f => ValType::I32,
            0x7e => ValType::I64,
            0x7d => ValType::F32,
            0x7c => ValType::F64,
            0x7b => ValType::V128,
            c @ (0x70 | 0x6f) => ValType::Ref(c),
            _ => return Err(self.err("unsupported value type")),
        })
    }

    fn limits(&mut self) -> Result<Memory, ParseError> {
        let flags = self.byte()?;
        let initial = self.uleb()?;
        let maximum = if flags & 1 != 0 { Some(self.uleb()?) } else { None };
        Ok(Memory { initial, maximum })
    }
}

/// Reads the parts of a module a graft's contract is about. Custom and code sections are skipped.
pub fn parse(bytes: &[u8]) -> Result<ModuleInfo, ParseError> {
    let mut r = Reader { bytes, pos: 0 };
    if r.take(4)? != MAGIC {
        return Err(ParseError {
            offset: 0,
            what: "not a WebAssembly module (bad magic)",
        });
    }
    if r.take(4)? != [1, 0, 0, 0] {
        return Err(ParseError {
            offset: 4,
            what: "not a core module, version 1",
        });
    }
    let mut m = ModuleInfo::default();
    while r.pos < bytes.len() {
        let id = r.byte()?;
        let size = r.u32()? as usize;
        let body = r.take(size)?;
        let mut s = Reader { bytes: body, pos: 0 };
        let base = r.pos - size;
        let fix = |mut e: ParseError| {
            e.offset += base;
            e
        };
        match id {
            1 => parse_types(&mut s, &mut m).map_err(fix)?,
            2 => parse_imports(&mut s, &mut m).map_err(fix)?,
            3 => {
                for _ in 0..s.u32().map_err(fix)? {
                    let t = s.u32().map_err(fix)?;
                    m.func_types.push(t);
                }
            }
            5 => {
                for _ in 0..s.u32().map_err(fix)? {
                    let l = s.limits().map_err(fix)?;
                    m.memories.push(l);
                }
            }
            6 => parse_globals(&mut s, &mut m).map_err(fix)?,
            7 => {
                for _ in 0..s.u32().map_err(fix)? {
                    let name = s.name().map_err(fix)?;
                    let kind = extern_kind(&mut s).map_err(fix)?;
                    let index = s.u32().map_err(fix)?;
                    m.exports.push(Export { name, kind, index });
                }
            }
            _ => {}
        }
    }
    Ok(m)
}

fn extern_kind(s: &mut Reader<'_>) -> Result<ExternKind, ParseError> {
    Ok(match s.byte()? {
        0 => ExternKind::Func,
        1 => ExternKind::Table,
        2 => ExternKind::Memory,
        3 => ExternKind::Global,
        4 => ExternKind::Tag,
        _ => return Err(s.err("unknown external kind")),
    })
}

fn parse_types(s: &mut Reader<'_>, m: &mut ModuleInfo) -> Result<(), ParseError> {
    for _ in 0..s.u32()? {
        if s.byte()? != 0x60 {
            return Err(s.err("unsupported type form (only func types)"));
        }
        let vals =
            |s: &mut Reader<'_>| -> Result<Vec<ValType>, ParseError> { (0..s.u32()?).map(|_| s.valtype()).collect() };
        let params = vals(s)?;
        let results = vals(s)?;
        m.types.push(FuncType { params, results });
    }
    Ok(())
}

fn parse_imports(s: &mut Reader<'_>, m: &mut ModuleInfo) -> Result<(), ParseError> {
    for _ in 0..s.u32()? {
        let module = s.name()?;
        let name = s.name()?;
        let kind = extern_kind(s)?;
        match kind {
            ExternKind::Func => {
                let t = s.u32()?;
                m.func_types.push(t);
            }
            ExternKind::Table => {
                s.valtype()?;
                s.limits()?;
            }
            ExternKind::Memory => {
                s.limits()?;
            }
            ExternKind::Global => {
                s.valtype()?;
                s.byte()?;
                m.imported_globals += 1;
            }
            ExternKind::Tag => {
                s.byte()?;
                s.u32()?;
            }
        }
        m.imports.push(Import { module, name, kind });
    }
    Ok(())
}

fn parse_globals(s: &mut Reader<'_>, m: &mut ModuleInfo) -> Result<(), ParseError> {
    for _ in 0..s.u32()? {
        let ty = s.valtype()?;
        let mutable = s.byte()? != 0;
        // The initialiser: a constant expression ending in `end` (0x0b).
        let mut init = None;
        let mut first = true;
        loop {
            let op = s.byte()?;
            match op {
                0x0b => break,
                0x41 | 0x42 => {
                    let v = s.sleb()?;
                    if first {
                        init = Some(v);
                    }
                }
                0x23 | 0xd2 => {
                    s.u32()?;
                    init = None;
                }
                0x43 => {
                    s.take(4)?;
                }
                0x44 => {
                    s.take(8)?;
                }
                0xd0 => {
                    s.byte()?;
                }
                _ => return Err(s.err("unsupported instruction in a global initialiser")),
            }
            if !first {
                init = None; // an extended constant expression: not a plain constant
            }
            first = false;
        }
        m.globals.push(Global { ty, mutable, init });
    }
    Ok(())
}
