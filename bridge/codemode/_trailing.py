"""Finds, from the tokens alone, whether a program ends with an expression statement.

A run's value is `result`, else the value of a trailing expression statement. Finding that statement
through the AST (parse to AST objects, rewrite, compile the AST) costs about twice what compiling the
source does on wasm (a 25-line program: 8.4 M instructions against 4.5 M). The C tokenizer tells the
same from the tokens: the runner compiles the source as it is when it does not end with an expression
(the usual `result = ...`), and takes the AST path only for a trailing expression (rewriting the source
instead would move that line's columns, and a traceback's marks with them) and for what the tokens
leave in doubt (None: a line that starts with the soft keyword `match`, a carriage return, code
the tokenizer rejects).
"""

from __future__ import annotations

import _tokenize  # type: ignore[import-not-found]  # CPython's C tokenizer, no stubs
import re
import token
import warnings
from collections.abc import Iterator
from typing import Any, cast

# Statements that start with one of these keywords are compound: their last line is not the statement.
# `match` is a soft keyword (`match = 1` is an assignment): a line that starts with it is left to the AST.
_COMPOUND = frozenset({
    "if", "for", "while", "with", "try", "def", "class", "async", "else", "elif", "except", "finally", "match",
})  # fmt: skip
_STATEMENT_KEYWORDS = frozenset({
    "pass", "break", "continue", "return", "raise", "global", "nonlocal", "import", "from", "assert", "del",
})  # fmt: skip
# Outside brackets and lambdas, only an assignment (plain, augmented, annotated, `type X = ...`) has these.
_ASSIGNING = frozenset({
    token.EQUAL, token.COLON, token.PLUSEQUAL, token.MINEQUAL, token.STAREQUAL, token.SLASHEQUAL,
    token.PERCENTEQUAL, token.AMPEREQUAL, token.VBAREQUAL, token.CIRCUMFLEXEQUAL, token.LEFTSHIFTEQUAL,
    token.RIGHTSHIFTEQUAL, token.DOUBLESTAREQUAL, token.DOUBLESLASHEQUAL, token.ATEQUAL,
})  # fmt: skip
_OPENING = frozenset({token.LPAR, token.LSQB, token.LBRACE})
_CLOSING = frozenset({token.RPAR, token.RSQB, token.RBRACE})
_SKIPPED = frozenset({token.NL, token.COMMENT})
_INDENT, _DEDENT, _NEWLINE, _ENDMARKER = token.INDENT, token.DEDENT, token.NEWLINE, token.ENDMARKER
_NAME, _SEMI, _AT = token.NAME, token.SEMI, token.AT
_IGNORE_ALL = ("ignore", None, Warning, None, 0)

# One physical line without `;` that starts with `name =` or a statement keyword holds no expression
# statement (if it compiles at all): no need for the tokenizer, whose own set-up costs 25 k instructions.
_ONE_LINE_STATEMENT = re.compile(
    r"(?:[A-Za-z_][A-Za-z0-9_]*[ \t]*=(?!=)|(?:pass|import|from|del|assert|raise|global|nonlocal)\b)"
)


def ends_with_expression(code: str) -> bool | None:
    """Whether `code`'s last top-level statement is an expression statement (False when there is none),
    None when the tokens cannot tell.

    Valid code only is answered for; the compile that follows reports invalid code. The last logical
    line at indentation 0 starts the last statement unless a compound statement owns it; on a line of
    simple statements the last one (after the last `;`) is an assignment when it has `=`, an augmented
    `op=` or an annotation `:` outside brackets before any `lambda` (f-string fields come as bracket
    tokens), a keyword statement when it starts with one, and an expression statement otherwise.
    """
    if "\r" in code:  # compile reads a lone `\r` as a line end, the tokenizer's readline not
        return None
    if ";" not in code and "\n" not in code.rstrip(" \t\n") and _ONE_LINE_STATEMENT.match(code):
        return False
    # The tokenizer warns (`1if x else y`) and the compile warns once more: ignore its warnings. A filter
    # put in and taken out directly costs 4 k instructions, `catch_warnings` 46 k; the tokenizer's warnings
    # carry no registry, so no cache keeps the filter's decision.
    filters = cast("list[Any]", warnings.filters)  # a list, typed as a Sequence
    filters.insert(0, _IGNORE_ALL)
    try:  # tokens one at a time: a list of a big program's tokens would weigh more than the program
        return _scan(_tokenize.TokenizerIter(iter((code,)).__next__, extra_tokens=False))
    except Exception:  # a syntax error: the AST path reports it as before
        return None
    finally:
        filters.remove(_IGNORE_ALL)


def _scan(tokens: Iterator[tuple[Any, ...]]) -> bool | None:
    """`ends_with_expression` over the tokens."""
    level = depth = 0
    line_start, statement_start, skip_line, lambda_seen = True, False, False, False
    expression = False  # no statement at all: nothing to return
    for each in tokens:
        kind, text = each[0], each[1]  # not `kind, text, *_`: a list per token costs 3 k instructions
        if kind == _INDENT:
            level += 1
            continue
        if kind == _DEDENT:
            level -= 1
            continue
        if kind == _NEWLINE:
            line_start = True
            continue
        if kind == _ENDMARKER:
            break
        if level or kind in _SKIPPED:  # inside the block of a compound statement, already decided
            continue
        if line_start:
            line_start = False
            skip_line = kind == _AT or (kind == _NAME and text in _COMPOUND)
            if skip_line:
                if text == "match":  # `match x:` or `match = 1`: the AST tells
                    return None
                expression = False
                continue
            statement_start = True
        elif skip_line:
            continue
        if kind == _SEMI:
            statement_start = True  # a trailing `;` keeps the verdict of the statement before it
            continue
        if statement_start:
            statement_start = lambda_seen = False
            depth = 0
            expression = not (kind == _NAME and text in _STATEMENT_KEYWORDS)
        if kind in _OPENING:
            depth += 1
        elif kind in _CLOSING:
            depth -= 1
        elif not depth and expression and not lambda_seen:
            if kind in _ASSIGNING:
                expression = False
            elif kind == _NAME and text == "lambda":  # its defaults and `:` are not an assignment's
                lambda_seen = True
    return expression
