"""``pluie-reward serve``: run the judge server (:mod:`pluie_reward.serving`; FastAPI + uvicorn, imported only when serving)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import socket
import sys
from pathlib import Path

from ...core.template import load_template
from ...integrations.fields import parse_assignments
from ...integrations.novelty import TASKS
from ...serving.mapping import DEFAULT_STRIP, REWARDS, SOURCES, RewardMapping
from ...serving.protocol import TOKEN_ENV
from ...serving.runner import run
from ..cli.common import add_judge_arguments, judge_from_args
from ..cli.registry import command
from ..shared import UsageError, finite_float, nonneg_float, port, positive_float, positive_int

SHUTDOWN_S = 30.0  # default drain bound at SIGTERM (--graceful-timeout)
BODY_TIMEOUT_S = 60.0  # default bound on a body's upload (--body-timeout)
MAX_BODY_MB = 1024 * 1024  # 1 TiB: a larger --max-body-mb is a typo (the server holds a body in memory)
MAX_ITEM_CHARS = 16384
"""``--max-item-chars``'s default (about 3-4k tokens of English): one item is one forward pass that holds the judge for
every client (embedded judge, one CPU thread: 24 s for 16384 characters, 85-100 s for its whole 8192-token context)."""


def _configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--template", "-t", default="para-fs", help="template name or YAML path (default para-fs)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=port, default=8000, help="port (default 8000)")
    p.add_argument("--threshold", type=finite_float, default=0.0, help="verdict = logratio > threshold (default 0)")
    p.add_argument("--no-truncate", action="store_true", help="reject over-long items (422) instead of cutting them")
    g = p.add_argument_group("batching")
    g.add_argument("--max-wait-ms", type=nonneg_float, default=5.0, help="how long a request may wait for others to batch with (default 5)")
    g.add_argument("--max-batch-items", type=positive_int, default=256, help="items per Judge.score call (default 256)")
    g.add_argument("--max-batch-tokens", type=positive_int, default=32768,
                   help="estimated field tokens per Judge.score call (default 32768)")
    g = p.add_argument_group("safety")
    g.add_argument("--token-file", type=Path,
                   help=f"file holding the bearer token clients must send (default: ${TOKEN_ENV} if set, else none)")
    g.add_argument("--max-items-per-request", type=positive_int, default=1024, help="larger requests get 413 (default 1024)")
    g.add_argument("--max-item-chars", type=positive_int, default=MAX_ITEM_CHARS,
                   help=f"an item whose fields hold more characters gets 413, so that one long item cannot hold the judge for "
                        f"every other client (default {MAX_ITEM_CHARS}; an item is one forward pass, cut to the judge's context)")
    g.add_argument("--max-body-mb", type=positive_float, default=4.0, help="larger request bodies get 413 (default 4 MiB)")
    g.add_argument("--body-timeout", type=positive_float, default=BODY_TIMEOUT_S,
                   help=f"seconds a request body may take to arrive whole; a slower upload gets 408 (default {BODY_TIMEOUT_S:g})")
    g.add_argument("--graceful-timeout", type=nonneg_float, default=None,
                   help=f"at SIGTERM/SIGINT, seconds the queued and running requests get to finish before they are answered "
                        f"503 (default {SHUTDOWN_S:g})")
    g = p.add_argument_group("OpenRLHF /get_reward")
    g.add_argument("--rm-field", action="append", default=[], metavar="FIELD=SOURCE",
                   help=f"fill template FIELD from SOURCE, one of {list(SOURCES)} (default: source=label, hypothesis=response)")
    g.add_argument("--rm-reward", choices=REWARDS, default="logratio", type=lambda name: name.strip().lower(),
                   help="what 'rewards' holds: logratio (default), p_yes, verdict, or a task's copy-proof reward "
                        "(paraphrase, translation, revision: p_yes gated by novelty, a copy gets 0; train a "
                        "generator with it)")
    g.add_argument("--rm-strip", action="append", default=[], metavar="TEXT",
                   help="also strip TEXT from the end of responses (end-of-turn markers like <|im_end|> are stripped already)")
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    add_judge_arguments(p)


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is None:
        return os.environ.get(TOKEN_ENV) or None
    token = args.token_file.read_text(encoding="utf-8").strip() if args.token_file.is_file() else None
    if not token:
        raise UsageError(f"--token-file {str(args.token_file)!r} {'is empty' if token == '' else 'does not exist'}.")
    return token


def body_bytes(max_body_mb: float) -> int:
    """``--max-body-mb`` in bytes: at least 1 byte, at most :data:`MAX_BODY_MB`, else a :class:`UsageError`.

    Example:
        >>> body_bytes(4.0)
        4194304
        >>> body_bytes(1e-9)
        Traceback (most recent call last):
        ...
        pluie_reward.tools.shared.UsageError: --max-body-mb 1e-09: give a size from 1 byte (about 1e-06 MiB) to 1048576 MiB (1 TiB).
    """
    size = max_body_mb * 1024 * 1024
    if not 1 <= size <= MAX_BODY_MB * 1024 * 1024:
        raise UsageError(f"--max-body-mb {max_body_mb:g}: give a size from 1 byte (about {1 / 2**20:.0e} MiB) to "
                         f"{MAX_BODY_MB} MiB (1 TiB).")
    return int(size)


def check_host(host: str) -> bool:
    """Whether ``--host`` is this machine only (every address it resolves to is a loopback one); a usage error for a
    host this machine does not resolve (before the model loads; uvicorn would after).

    Example:
        >>> check_host("127.0.0.1"), check_host("localhost"), check_host("0.0.0.0")
        (True, True, False)
    """
    try:
        addresses = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as err:
        raise UsageError(f"--host {host!r}: not an address or a host name this machine resolves ({err}); use e.g. "
                         "127.0.0.1 (this machine only) or 0.0.0.0 (every interface).") from None
    return all(ipaddress.ip_address(address[4][0].split("%")[0]).is_loopback for address in addresses)  # %: an IPv6 scope


def mapping_from_args(args: argparse.Namespace) -> RewardMapping | None:
    """The OpenRLHF field mapping the ``--rm-*`` options describe (checked against the template), or ``None`` when
    the template has no default one and none is given (``/get_reward`` then answers 501; ``/score`` works)."""
    try:
        overrides = parse_assignments(args.rm_field, "--rm-field")
        return RewardMapping.for_template(
            load_template(args.template), overrides, reward=args.rm_reward, strip=DEFAULT_STRIP + tuple(args.rm_strip)
        )
    except ValueError as err:
        if not args.rm_field and args.rm_reward not in TASKS:  # the template has no default mapping: serve /score only
            return None
        raise UsageError(str(err)) from None


def server_options(args: argparse.Namespace) -> dict:
    """The keyword arguments of :func:`~pluie_reward.serving.app.create_app` (after the template) that the options
    describe, checked before any model loads; warns on stderr when ``--host`` is not a loopback address and no token
    is set."""
    mapping = mapping_from_args(args)  # fail on bad options before loading a model
    max_body_bytes = body_bytes(args.max_body_mb)
    loopback = check_host(args.host)
    token = _token(args)
    if not loopback and token is None:
        print(
            f"pluie-reward serve: warning: listening on {args.host} without a token; anyone who can reach this "
            f"port can use the judge. Set ${TOKEN_ENV} or --token-file.",
            file=sys.stderr,
        )
    same = ("max_items_per_request", "max_batch_items", "max_batch_tokens", "max_wait_ms", "threshold", "max_item_chars",
            "body_timeout")  # options named as create_app's keywords
    return {"mapping": mapping, "token": token, "max_body_bytes": max_body_bytes, "truncate": not args.no_truncate,
            "shutdown_timeout": SHUTDOWN_S if args.graceful_timeout is None else args.graceful_timeout,
            **{name: getattr(args, name) for name in same}}


@command("serve", _configure)
def serve_command(args: argparse.Namespace) -> int:
    """Serve a judge over HTTP for RL frameworks (POST /score, /get_reward; GET /health, /metrics)."""
    options = server_options(args)  # fail on bad options before loading a model
    from ...serving.app import create_app  # optional: fastapi (without it, its error names the extra: exit 2 in main)

    judge = judge_from_args(args)
    app = create_app(judge, args.template, **options)
    # ready means ready: the first request must not pay the template binding and prefix (uvicorn listens after this)
    print(f"pluie-reward serve: warming up {judge.name} on {args.template}...", file=sys.stderr, flush=True)
    print(f"pluie-reward serve: warm in {judge.warm_up(args.template):.1f} s", file=sys.stderr, flush=True)
    # the app answers everything within shutdown_timeout; uvicorn's own bound is a backstop a little later
    run(app, host=args.host, port=args.port, log_level=args.log_level, graceful_timeout=options["shutdown_timeout"] + 5.0)
    return 0
