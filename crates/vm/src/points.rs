//! The pager's own graftpoint.

use crate::pager::FAULT_AROUND_MAX;
use vino_graft::{GraftPoint, Invalid};

/// A fault at page `page` of a memory of `pages` pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FaultArgs {
    pub page: u64,
    pub pages: u64,
}

/// `vm.fault_around`: which pages come in with a fault, the read-ahead of virtual memory.
/// `vm_fault_around(page: i64, pages: i64) -> i64` answers `(first << 32) | count`: `count`
/// pages from `first`, at most [`FAULT_AROUND_MAX`], the faulting page among them, none past
/// the memory's end. Any other answer aborts the invocation and the default decides: the
/// faulting page alone. The pages come in after the program is woken, so a slow graft delays
/// no one's fault but its own neighbours'.
pub struct FaultAround;

impl GraftPoint for FaultAround {
    const NAME: &'static str = "vm.fault_around";
    const BUDGET: std::time::Duration = std::time::Duration::from_micros(50);
    type Env = u64;
    type Args<'a> = FaultArgs;
    type Output = (u64, u64);
    type Params = (i64, i64);
    type Results = i64;

    fn default_policy(_: &u64, a: &FaultArgs) -> (u64, u64) {
        (a.page, 1)
    }

    fn encode(_: &u64, a: &FaultArgs, _: &mut [u8]) -> (i64, i64) {
        (a.page as i64, a.pages as i64)
    }

    fn decode(_: &u64, a: &FaultArgs, result: i64, _: &[u8]) -> Result<(u64, u64), Invalid> {
        let (first, count) = ((result as u64) >> 32, result as u64 & 0xffff_ffff);
        let valid = result >= 0
            && (1..=FAULT_AROUND_MAX).contains(&count)
            && first <= a.page
            && a.page < first + count
            && first + count <= a.pages;
        if valid {
            Ok((first, count))
        } else {
            Err(Invalid(format!(
                "fault-around answer ({first}, {count}) for page {} of {} is not a range of at most {FAULT_AROUND_MAX} pages around it",
                a.page, a.pages
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_checked() {
        let a = FaultArgs { page: 10, pages: 20 };
        let ok = |first: i64, count: i64| FaultAround::decode(&0, &a, (first << 32) | count, &[]);
        assert_eq!(ok(8, 4), Ok((8, 4)));
        assert!(ok(11, 4).is_err(), "the faulting page is outside");
        assert!(ok(10, 0).is_err());
        assert!(ok(0, 33).is_err(), "too many");
        assert!(ok(18, 4).is_err(), "past the end");
        assert!(FaultAround::decode(&0, &a, -1, &[]).is_err());
    }
}
