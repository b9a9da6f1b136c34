"""What every program here runs in (the commands, the studies' runner and stages, the
benchmarks): a quiet TensorFlow start, one-line errors, clean stops.

`quiet_tensorflow()` runs before a program imports Keras or TensorFlow (`import keras_tupe_cli`
calls it for every command) and imports neither (flags parse first: a usage error takes a
fraction of a second). It hides TensorFlow's C++ log lines (`TF_CPP_MIN_LOG_LEVEL=3`), the CUDA
probe of a machine with no GPU device node (`CUDA_VISIBLE_DEVICES=""`, only where unset, so a
real GPU is never hidden) and the `cudart_stub` lines TensorFlow's import writes before its
logging is set up (stderr goes to /dev/null while the first `import tensorflow` runs, wherever
it happens). `--tf-logs` (or `KERAS_TUPE_TF_LOGS=1`) leaves all of this as TensorFlow does it.

`run(main, argv)` turns a user's mistake (a `ValueError`, the `OSError` of a path they gave, a
missing TensorFlow extra, an output folder another process writes, a full disk or read-only
folder, `SystemExit("message")`) into `error: <message>` on stderr, a line per problem, and
argparse's status 2; any other exception is a bug and keeps its traceback (`--traceback` or
`KERAS_TUPE_TRACEBACK=1` shows it for user errors too). Ctrl-C prints `interrupted` (status
130), SIGTERM `terminated` (143), after the cleanups of the code they stopped
(`keras_tupe_base.folders.made_folder`). A warning, and a notice the library logs, reach the user
as one line, `warning: <message>`, without the module, source line or logger name Python adds.

What only the commands share (flags made from a settings dataclass) is `keras_tupe_cli.common`.
"""

import contextlib
import functools
import glob
import importlib.util
import logging
import os
import signal
import sys
import warnings

from keras_tupe_base import extras, output_lock, staging

TF_LOGS_FLAG = "--tf-logs"
TRACEBACK_FLAG = "--traceback"

# Mistakes a user can make in flags and files; everything else is ours.
# ConnectionError: a download that cannot start offline (keras_tupe.data.network).
# BlockingIOError: `keras_tupe_base.output_lock.OutputLockedError`, another process writes --out.
# The library's own (`_library_user_error`): `OutputNotWritableError`, a missing TensorFlow
# extra, a full disk.
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
               IsADirectoryError, PermissionError, ConnectionError, BlockingIOError)


def quiet_tensorflow(verbose=None):
    """Silences TensorFlow's start-up noise; call before TensorFlow is imported.

    Args:
        verbose: bool or None. `True` changes nothing. `None` (the default) reads the
            command line (`--tf-logs`) and `KERAS_TUPE_TF_LOGS`.
    """
    if verbose is None:
        verbose = TF_LOGS_FLAG in sys.argv[1:] or os.environ.get("KERAS_TUPE_TF_LOGS") == "1"
    if verbose:
        return
    logging.getLogger("absl").addFilter(_no_jax_profiler_warning)  # once, however often called
    # 3, also over a lower level set in the environment (the Makefile's 2 let the
    # cuInit error through, which TensorFlow logs at its first device query, after import).
    if os.environ.get("TF_CPP_MIN_LOG_LEVEL", "0") < "3":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    # A GPU's device nodes (Linux, or WSL2's /dev/dxg): never hidden.
    if "CUDA_VISIBLE_DEVICES" not in os.environ and not (
            glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/dxg")):
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
    if "tensorflow" in sys.modules or any(
            isinstance(finder, _QuietTensorFlowImport) for finder in sys.meta_path):
        return
    sys.meta_path.insert(0, _QuietTensorFlowImport())


@contextlib.contextmanager
def _stderr_hidden():
    """File descriptor 2 goes to /dev/null inside the block (C++ writes included)."""
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):  # no real stderr (an embedding host): nothing to hide
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _no_jax_profiler_warning(record):
    """grain (imported with keras-hub) warns on every start where JAX is not installed."""
    return not record.getMessage().startswith("Failed to load jax profiler")


class _QuietTensorFlowImport:
    """An import hook: the first `import tensorflow` runs with stderr hidden, then it goes.

    Importing TensorFlow takes seconds, so it is not done up front: whichever module
    imports it first (Keras, keras_tupe, an entry point) gets the quiet start.
    """

    def find_spec(self, name, path=None, target=None):
        if name != "tensorflow":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once; the search below must not find us again
        spec = importlib.util.find_spec(name)
        loader = spec and spec.loader
        exec_module = getattr(loader, "exec_module", None)

        def quiet_exec_module(module):
            try:
                with _stderr_hidden():
                    exec_module(module)
            finally:  # the loader's own method again (a shared loader: at the first module)
                vars(loader).pop("exec_module", None)

        if exec_module is not None:
            with contextlib.suppress(AttributeError):  # a loader with __slots__: not hidden
                loader.exec_module = quiet_exec_module
        return spec


def add_common_flags(parser):
    """`--tf-logs` and `--traceback`, which every command accepts, and `one_line_errors`."""
    one_line_errors(parser)
    parser.add_argument(TF_LOGS_FLAG, action="store_true",
                        help="show TensorFlow's C++ start-up and device logs")
    parser.add_argument(TRACEBACK_FLAG, action="store_true",
                        help="show the Python traceback of an error instead of one line")
    return parser


def one_line_errors(parser):
    """The parser's own errors (an unknown flag, a wrong value, a missing flag) become one
    line, `error: ... (`PROG --help` lists the flags)`, not the usage block."""
    parser.error = functools.partial(_one_line_error, parser)
    return parser


def _one_line_error(parser, message):
    print(f"error: {' '.join(message.split())} (`{parser.prog} --help` lists the flags)",
          file=sys.stderr)
    sys.exit(2)


class Terminated(BaseException):
    """SIGTERM arrived (inside `run`): unwinds like Ctrl-C, so cleanups run."""


def _raise_terminated(signum, frame):
    raise Terminated()


@contextlib.contextmanager
def _plain_notices():
    """Inside the block, warnings and the library's logged notices print `warning: <message>`
    on stderr, one line (Python's own forms add the module path, the source line, the
    logger's name), and come once (not also through a handler set up on the root logger)."""
    def show(message, category, filename, lineno, file=None, line=None):
        print(f"warning: {' '.join(str(message).split())}", file=file or sys.stderr)

    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(logging.Formatter("warning: %(message)s"))
    library = logging.getLogger("keras_tupe")
    saved = warnings.showwarning, library.propagate
    warnings.showwarning, library.propagate = show, False
    library.addHandler(handler)
    try:
        yield
    finally:
        library.removeHandler(handler)
        warnings.showwarning, library.propagate = saved


@contextlib.contextmanager
def _sigterm_raises():
    """SIGTERM raises `Terminated` in the block (main thread only), then as before."""
    try:
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: signals cannot be handled here
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run(main, argv=None, flags=None):
    """Calls `main(argv)`; a user error becomes `error: ...` on stderr and status 2 (see
    the module's docstring). `flags` ({argument: flag}) makes the library's messages speak
    the command line: its `` `name=` `` becomes `` `--flag` ``.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        with _sigterm_raises(), _plain_notices():
            return main(argv)
    except (*USER_ERRORS, OSError, ImportError) as error:
        if not isinstance(error, USER_ERRORS) and not _library_user_error(error):
            raise  # an import or an OSError of ours
        if _wants_traceback(args):
            raise
        for line in error_lines(error, flags):
            print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("terminated", file=sys.stderr)
        return 143
    except SystemExit as exit:  # `raise SystemExit("message")`, a script's user error
        if not isinstance(exit.code, str):
            raise  # argparse's (already reported) and sys.exit(n)
        for line in error_lines(exit.code, flags):
            print(f"error: {line}", file=sys.stderr)
        return 2


def _library_user_error(error):
    """Whether an ImportError or OSError is the user's by the library's rules: a missing
    TensorFlow extra, an `--out` this process cannot write, a full disk or read-only folder."""
    if isinstance(error, ImportError):
        return extras.tensorflow_missing(error) is not None
    # The place written to failed, not the program: no space, a file-size limit, a quota, a
    # read-only or forbidden folder (also a `staging.WriteError` of those).
    return (isinstance(error, output_lock.OutputNotWritableError)
            or error.errno in staging.SPACE_ERRNOS)


def _wants_traceback(args):
    return TRACEBACK_FLAG in args or os.environ.get("KERAS_TUPE_TRACEBACK") == "1"


def error_lines(error, flags=None):
    """The exception's message (an OSError's with its path), a line per problem it lists.

    Arguments named `` `name=` `` become `` `--flag` `` where `flags` maps them.
    """
    if isinstance(error, OSError) and error.strerror and error.filename:
        message = f"{error.strerror}: {error.filename}"
    elif isinstance(error, ImportError):  # a missing extra's (`_library_user_error`)
        message = extras.tensorflow_missing(error, "This command") or str(error)
    else:
        message = str(error)
    for name, flag in (flags or {}).items():
        message = message.replace(f"`{name}=`", f"`{flag}`")
    return [" ".join(line.split()) for line in message.splitlines() if line.strip()]


def one_line_interrupts():
    """Ctrl-C outside `run` (while an entry point's modules import): one line, not a traceback.

    Python still ends the process by SIGINT, so its status is 130 as the shell shows it.
    Every other uncaught exception keeps the hook that was there.
    """
    previous = sys.excepthook
    if getattr(previous, "_one_line_interrupts", False):
        return

    def hook(kind, value, traceback):
        if issubclass(kind, KeyboardInterrupt) and not _wants_traceback(sys.argv[1:]):
            print("interrupted", file=sys.stderr)
            return
        previous(kind, value, traceback)

    hook._one_line_interrupts = True
    sys.excepthook = hook


def quiet_start():
    """What a program calls first, before anything imports Keras or TensorFlow: Ctrl-C is one
    line (`one_line_interrupts`) and TensorFlow starts quietly (`quiet_tensorflow`)."""
    one_line_interrupts()  # first: the sooner Ctrl-C is one line, the better
    quiet_tensorflow()
