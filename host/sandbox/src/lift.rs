//! Strings and lists lifted out of a guest with their caps checked on the canonical ABI's
//! `(pointer, length)` pair, before a byte is copied: [`Capped`] refuses a string over its cap,
//! [`CappedList`] a list with too many entries (both a [`Checked`] lift), and [`Clipped`] keeps a
//! string's first bytes (log lines, error messages). The refusal is an [`OverCap`] naming the field and the cap, so a
//! 100 MB observation or a list of 4000 metrics that all point at one guest string is reported
//! as what it is, not as an exhausted copy budget (wasmtime's per-call "hostcall fuel", which
//! stays the backstop for everything else, `crate::limits`).
//!
//! These implement wasmtime's `ComponentType` and `Lift` by forwarding to `String` and `Vec`
//! after the check (the forwarding impls of `Box<T>` and `Vec<T>` in wasmtime 48's
//! `runtime/component/func/typed.rs` are the model). The checks read the length from the same
//! flat pair or 8 bytes of memory that wasmtime's own lift reads (`lift_pointer_pair_from_flat`
//! and `lift_pointer_pair_from_memory` there).

use std::cell::Cell;
use std::marker::PhantomData;
use wasmtime::ValRaw;
use wasmtime::component::__internal::wasmtime_environ::component::StringEncoding;
use wasmtime::component::__internal::{CanonicalAbiInfo, InstanceType, InterfaceType, LiftContext};
use wasmtime::component::{ComponentType, Lift};

thread_local! {
    /// The running call's cap on text output (`SandboxConfig::max_output_bytes`). A store's
    /// calls run on the thread that makes them, and `Plugin::arm` sets this before each one.
    static OUTPUT_TEXT_CAP: Cell<usize> = const { Cell::new(usize::MAX) };
}

/// Set the text cap of the calls this thread makes next ([`output_text_cap`]).
pub(crate) fn set_output_text_cap(cap: usize) {
    OUTPUT_TEXT_CAP.with(|c| c.set(cap));
}

/// The cap on text output of the call running on this thread.
pub(crate) fn output_text_cap() -> usize {
    OUTPUT_TEXT_CAP.with(Cell::get)
}

/// A string field of plugin output and its cap in bytes.
pub(crate) trait TextField: 'static {
    /// The field as errors name it, e.g. `observation`.
    const NAME: &'static str;
    /// Its cap in bytes.
    fn cap() -> usize;
}

/// A list field of plugin output and its cap in entries.
pub(crate) trait ListField: 'static {
    /// The list's owner as errors name it, e.g. `step info`.
    const OWNER: &'static str;
    /// What its entries are, e.g. `metrics`.
    const ENTRIES: &'static str;
    /// Its cap in entries.
    const CAP: usize;
}

/// Declare marker types of text fields: `Name = "field", cap expression;`.
macro_rules! text_fields {
    ($($(#[$doc:meta])* $name:ident = $field:literal, $cap:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl $crate::lift::TextField for $name {
            const NAME: &'static str = $field;
            fn cap() -> usize {
                $cap
            }
        }
    )*};
}

/// Declare marker types of list fields: `Name = "owner", "entries", cap;`.
macro_rules! list_fields {
    ($($(#[$doc:meta])* $name:ident = $owner:literal, $entries:literal, $cap:expr;)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name;
        impl $crate::lift::ListField for $name {
            const OWNER: &'static str = $owner;
            const ENTRIES: &'static str = $entries;
            const CAP: usize = $cap;
        }
    )*};
}
pub(crate) use {list_fields, text_fields};

/// A field over its cap, found before it was copied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OverCap {
    /// A string longer than its cap.
    #[error("{field} is {len} bytes, over the cap of {cap}")]
    Text {
        /// The field.
        field: &'static str,
        /// Its length in bytes (for UTF-16 strings: twice the code units).
        len: usize,
        /// The cap.
        cap: usize,
    },
    /// A list with more entries than its cap.
    #[error("{owner} has {len} {entries}, over the cap of {cap}")]
    List {
        /// Whose list it is.
        owner: &'static str,
        /// What its entries are.
        entries: &'static str,
        /// How many entries it has.
        len: usize,
        /// The cap.
        cap: usize,
    },
}

/// The high bit of a `latin1+utf16` string's length says "UTF-16" (the canonical ABI's
/// `UTF16_TAG`).
const UTF16_TAG: usize = 1 << 31;

/// The bytes a string of `len` code units takes in the guest's encoding.
fn string_bytes(cx: &LiftContext<'_>, len: usize) -> usize {
    match cx.options().string_encoding {
        StringEncoding::Utf8 => len,
        StringEncoding::Utf16 => len.saturating_mul(2),
        StringEncoding::CompactUtf16 if len & UTF16_TAG != 0 => (len ^ UTF16_TAG).saturating_mul(2),
        StringEncoding::CompactUtf16 => len,
    }
}

/// `(pointer, length)` of a string or list, from its flat form.
fn flat_pair(src: &[ValRaw; 2]) -> (usize, usize) {
    (src[0].get_u32() as usize, src[1].get_u32() as usize)
}

/// `(pointer, length)` of a string or list, from its 8 bytes in linear memory.
fn memory_pair(bytes: &[u8]) -> wasmtime::Result<(usize, usize)> {
    let word = |at: usize| -> wasmtime::Result<usize> {
        let b: [u8; 4] = bytes
            .get(at..at + 4)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| wasmtime::Error::msg("pointer pair out of bounds of memory"))?;
        Ok(u32::from_le_bytes(b) as usize)
    };
    Ok((word(0)?, word(4)?))
}

/// A string of plugin output cut to `F`'s cap: the first bytes are copied (at a character
/// boundary), the rest is never read. `original_len` is the length the guest passed.
pub(crate) struct Clipped<F> {
    pub(crate) text: String,
    pub(crate) original_len: usize,
    _field: PhantomData<fn() -> F>,
}

impl<F> Clipped<F> {
    /// Whether the guest's string was longer than what was kept.
    pub(crate) fn was_clipped(&self) -> bool {
        self.original_len > self.text.len()
    }
}

/// Copy at most `cap` bytes of the UTF-8 string at `ptr`, charging the copy to the call's
/// budget. A multi-byte character cut by the cap is dropped; invalid UTF-8 is an error, as in
/// wasmtime's own lift.
fn clip_utf8(
    cx: &mut LiftContext<'_>,
    ptr: usize,
    len: usize,
    cap: usize,
) -> wasmtime::Result<String> {
    let memory = cx.memory();
    let end = ptr
        .checked_add(len)
        .filter(|end| *end <= memory.len())
        .ok_or_else(|| wasmtime::Error::msg("string pointer/length out of bounds of memory"))?;
    let kept = &memory[ptr..end.min(ptr + cap)];
    let text = match std::str::from_utf8(kept) {
        Ok(s) => s,
        // Cut inside a character: keep the whole characters before it.
        Err(e) if e.error_len().is_none() && kept.len() < len => {
            // SAFETY-free: `valid_up_to` is a boundary of valid UTF-8 by definition.
            std::str::from_utf8(&kept[..e.valid_up_to()]).map_err(wasmtime::Error::new)?
        }
        Err(e) => return Err(wasmtime::Error::new(e)),
    }
    .to_string();
    cx.consume_fuel(text.len())?;
    Ok(text)
}

fn lift_clipped<F: TextField>(
    cx: &mut LiftContext<'_>,
    (ptr, len): (usize, usize),
    lift_whole: impl FnOnce(&mut LiftContext<'_>) -> wasmtime::Result<String>,
) -> wasmtime::Result<Clipped<F>> {
    let cap = F::cap();
    let text = if matches!(cx.options().string_encoding, StringEncoding::Utf8) {
        clip_utf8(cx, ptr, len, cap)?
    } else {
        // UTF-16 guests: the whole string is lifted (within the copy budget), then cut.
        let mut s = lift_whole(cx)?;
        if s.len() > cap {
            let mut cut = cap;
            while !s.is_char_boundary(cut) {
                cut -= 1;
            }
            s.truncate(cut);
        }
        s
    };
    Ok(Clipped {
        text,
        original_len: string_bytes(cx, len),
        _field: PhantomData,
    })
}

// SAFETY: the ABI, lowered form and type check are `String`'s.
unsafe impl<F: TextField> ComponentType for Clipped<F> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <String as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: reads only the bounds-checked prefix of the string, or forwards to `String`'s lift.
unsafe impl<F: TextField> Lift for Clipped<F> {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        lift_clipped(cx, flat_pair(src), |cx| {
            String::linear_lift_from_flat(cx, ty, src)
        })
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        lift_clipped(cx, memory_pair(bytes)?, |cx| {
            String::linear_lift_from_memory(cx, ty, bytes)
        })
    }
}

/// A cap checked on the length of a string or list before it is lifted.
pub(crate) trait Check: 'static {
    /// What is lifted once the check passes.
    type Inner: Lift + ComponentType<Lower = [ValRaw; 2]>;
    /// Refuse `len` (code units or entries) with an [`OverCap`].
    fn check(cx: &LiftContext<'_>, len: usize) -> wasmtime::Result<()>;
}

/// A string or list of plugin output, refused before it is copied when `C` says so.
pub(crate) struct Checked<C: Check>(pub(crate) C::Inner, PhantomData<fn() -> C>);

/// A string of plugin output, refused with [`OverCap`] when over `F`'s cap.
pub(crate) type Capped<F> = Checked<TextCap<F>>;

/// A list of plugin output, refused with [`OverCap`] when it has more than `F::CAP` entries.
pub(crate) type CappedList<T, F> = Checked<ListCap<T, F>>;

/// [`Check`] of a string field `F`.
pub(crate) struct TextCap<F>(PhantomData<fn() -> F>);

impl<F: TextField> Check for TextCap<F> {
    type Inner = String;

    fn check(cx: &LiftContext<'_>, len: usize) -> wasmtime::Result<()> {
        let (bytes, cap) = (string_bytes(cx, len), F::cap());
        if bytes > cap {
            return Err(OverCap::Text {
                field: F::NAME,
                len: bytes,
                cap,
            }
            .into());
        }
        Ok(())
    }
}

/// [`Check`] of a list field `F` of `T`s.
pub(crate) struct ListCap<T, F>(PhantomData<fn() -> (T, F)>);

impl<T: Lift + 'static, F: ListField> Check for ListCap<T, F> {
    type Inner = Vec<T>;

    fn check(_cx: &LiftContext<'_>, len: usize) -> wasmtime::Result<()> {
        if len > F::CAP {
            return Err(OverCap::List {
                owner: F::OWNER,
                entries: F::ENTRIES,
                len,
                cap: F::CAP,
            }
            .into());
        }
        Ok(())
    }
}

// SAFETY: the ABI, lowered form and type check are `C::Inner`'s, whose lift this forwards to.
unsafe impl<C: Check> ComponentType for Checked<C> {
    type Lower = [ValRaw; 2];
    const ABI: CanonicalAbiInfo = CanonicalAbiInfo::POINTER_PAIR;

    fn typecheck(ty: &InterfaceType, types: &InstanceType<'_>) -> wasmtime::Result<()> {
        <C::Inner as ComponentType>::typecheck(ty, types)
    }
}

// SAFETY: forwards to `C::Inner`'s lift after a check that reads no guest memory.
unsafe impl<C: Check> Lift for Checked<C> {
    fn linear_lift_from_flat(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        src: &Self::Lower,
    ) -> wasmtime::Result<Self> {
        C::check(cx, flat_pair(src).1)?;
        Ok(Self(
            C::Inner::linear_lift_from_flat(cx, ty, src)?,
            PhantomData,
        ))
    }

    fn linear_lift_from_memory(
        cx: &mut LiftContext<'_>,
        ty: InterfaceType,
        bytes: &[u8],
    ) -> wasmtime::Result<Self> {
        C::check(cx, memory_pair(bytes)?.1)?;
        Ok(Self(
            C::Inner::linear_lift_from_memory(cx, ty, bytes)?,
            PhantomData,
        ))
    }
}

/// The [`OverCap`] behind a failed call, if a capped field stopped it.
pub(crate) fn over_cap(err: &wasmtime::Error) -> Option<&OverCap> {
    err.chain().find_map(|e| e.downcast_ref::<OverCap>())
}
