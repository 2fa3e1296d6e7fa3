//! The GUI (`augscope view`, or no subcommand).

use super::ViewArgs;
pub(super) fn view(args: ViewArgs) -> anyhow::Result<()> {
    #[cfg(feature = "gui")]
    {
        crate::app::run(args.files, args.label, args.series)
    }
    #[cfg(not(feature = "gui"))]
    {
        let _ = args;
        Err(super::usage(
            "this augscope was built without the GUI (feature `gui`); use a subcommand, see --help",
        ))
    }
}
