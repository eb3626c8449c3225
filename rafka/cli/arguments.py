"""Argument types of the subcommands: each parses one command line value or raises
``argparse.ArgumentTypeError`` with the message argparse prints."""

from __future__ import annotations

import argparse


def non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative; give 0 or more")
    return value


def positive_int(text: str) -> int:
    value = non_negative_int(text)
    if value == 0:
        raise argparse.ArgumentTypeError("0 is not allowed; give 1 or more")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is negative; give 0 or more")
    return value


def config_pair(text: str) -> tuple[str, str]:
    name, found, value = text.partition("=")
    if not found or not name.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=VALUE")
    return name.strip(), value.strip()


def key_separator(text: str) -> str:
    text = text.replace("\\t", "\t")
    if not text:
        raise argparse.ArgumentTypeError("the key separator is empty")
    return text


def disk_name(text: str) -> str:
    from rafka.actors.placement import check_disk_name

    try:
        return check_disk_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
