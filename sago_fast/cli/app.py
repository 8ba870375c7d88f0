"""Root of the ``sago`` CLI. Known errors end in one stderr line and exit code 2 (``--debug`` for tracebacks)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated

import typer

from sago_fast.cli import demo, files, lmeval, models, query, report, run, stats
from sago_fast.cli.variants import variants_app

app = typer.Typer(
    name="sago",
    help="sago_fast: measure how stable language models are when the same input is expressed differently.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.command("export", help=models.EXPORT_HELP)(models.export_command)
app.command("probe", help=models.PROBE_HELP)(models.probe_command)
app.command("query", help=query.__doc__)(query.query_command)
app.command("run", help=run.__doc__)(run.run_command)
app.command("demo", help=demo.DEMO_HELP)(demo.demo_command)
app.command("stats", help=stats.__doc__)(stats.stats_command)
app.command("status", help=files.STATUS_HELP)(files.status_command)
app.command("merge", help=files.MERGE_HELP)(files.merge_command)
app.command("bench", help=models.BENCH_HELP)(models.bench_command)
app.command("report", help=report.__doc__)(report.report_command)
app.add_typer(variants_app, name="variants")
app.command("zoo", help=demo.ZOO_HELP)(demo.zoo_command)
app.command(
    "lm-eval",
    help=lmeval.__doc__,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)(lmeval.lmeval_command)


@app.callback()
def root(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress (INFO).")] = False,
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    logging.basicConfig(
        level=logging.DEBUG if debug else logging.INFO if verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
    )
    from sago_fast.runtime.threads import check_threads

    check_threads()  # a bad $SAGO_THREADS is one line before any work


def main() -> None:
    """Console-script entry point."""
    import os

    # The CLI owns its process: Numba's OpenMP pool and OpenBLAS spin-wait after work and, on few cores,
    # slow each other down badly when interleaved. Sleeping waiters cost microseconds instead.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from sago_fast.errors import Interrupted, SagoError

    try:  # typer >= 0.22 vendors click; older typer uses click itself
        from typer._click.exceptions import NoArgsIsHelpError, UsageError
    except ImportError:  # pragma: no cover
        from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]

    debug = "--debug" in sys.argv[1:]
    try:
        run_app()
    except NoArgsIsHelpError as exc:  # `sago` or `sago variants` alone: the help
        exc.show()
        sys.exit(exc.exit_code)
    except UsageError as exc:  # a wrong type, an unknown option, a missing value: one line, as every error
        if debug:
            raise
        print(f"sago: error: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(2)
    except typer.Abort:
        _exit_interrupted("sago: interrupted before any result was written")
    except Interrupted as exc:
        _exit_interrupted(f"sago: interrupted: {exc}")
    except SagoError as exc:
        if debug:
            raise
        print(f"sago: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        _exit_interrupted("sago: interrupted before any result was written")


def run_app() -> None:
    """Parse the command line and run the command, parser errors raised rather than printed (``main``
    turns them into one line); exits with the code ``--help`` and friends return."""
    code = typer.main.get_command(app).main(prog_name="sago", standalone_mode=False)
    if isinstance(code, int) and code:
        sys.exit(code)


def _one_line(text: str) -> str:
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def _exit_interrupted(message: str) -> None:
    """Print ``message`` and end the process with exit code 130, for certain.

    ``sys.exit(130)`` is not enough: CPython marks a KeyboardInterrupt that escaped any ``exec()`` of
    source text (dataclasses, namedtuple and Numba build code that way while modules import) as
    unhandled, even when it was caught further up, and under ``python -m`` the interpreter then kills
    itself with SIGINT at exit (return code -2). So the exit handlers run here, and the process ends
    with ``os._exit``; a second Ctrl-C while they run is ignored.
    """
    import atexit
    import os
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    print(message, file=sys.stderr)
    try:
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # a closed pipe: nothing more can be said
                pass
        os._exit(130)


if __name__ == "__main__":
    main()
