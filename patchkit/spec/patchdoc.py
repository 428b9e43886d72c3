"""A patch file as a document: patchkit's own form or a mail (``git format-patch``).

patchkit's own form (read and written as before)::

    Subject: ...                      a header block of patchkit's fields
    Why: ...
    Upstream-Status: pending
    When: SHA..

    free text
    diff --git a/x b/x              the diff

A mail, as ``git format-patch`` writes it and ``git am`` takes it::

    From <sha> Mon Sep 17 00:00:00 2001
    From: Name <mail>                 RFC 2047 encoded words, folded lines
    Date: Thu, 6 Jun 2024 23:55:47 -0700
    Subject: [PATCH] the title
    (MIME-Version / Content-Type: text/plain; charset=UTF-8 / Content-Transfer-Encoding: 8bit)

    the message
    Upstream-Status: pending          patchkit's fields as trailers, every one optional
    Patchkit-When: SHA..
    ---
     x | 2 +-                         the diffstat
     1 file changed, ...

    diff --git a/x b/x
    ...
    --                                an optional signature
    2.39.5

In a mail every field of patchkit is optional: ``Why`` is the message's first paragraph
(or the title), ``Upstream-Status`` ``pending``, ``When`` ``..`` (any commit), ``Default``
yes; a field found so is *derived*, and the document says which. The trailer names are
``Upstream-Status`` (the trailer OpenEmbedded uses, with the same values) and
``Patchkit-Why``, ``Patchkit-When``, ``Patchkit-Default``, ``Patchkit-Experimental``,
``Patchkit-Name``; ``git am`` keeps them in the commit message, so the same file serves
both tools. patchkit's fields may also be extra lines of the mail's header block (under
their own names or the trailers'; ``git am`` ignores them there). A file with patchkit's
header block followed by a mail (what a conversion script or an older ``refresh`` made) is
patchkit's form with an author.

A file is kept as bytes: the parts (head, message, diffstat, diff, signature) are slices
of it, and the diff is never decoded and encoded again.

This module is the document's API; the work is in three modules: the parts
(:mod:`patchkit.spec.patchparts`), reading (:mod:`patchkit.spec.patchread`) and writing
(:mod:`patchkit.spec.patchwrite`).
"""

from __future__ import annotations

from patchkit.spec.patchparts import Parts, split_mbox, split_parts
from patchkit.spec.patchread import (
    DERIVABLE,
    MAX_HEADER,
    TRAILERS,
    Ident,
    MailHead,
    PatchDoc,
    PatchFields,
    commit_of,
    derive_fields,
    read_doc,
)
from patchkit.spec.patchwrite import add_trailers, decode_transfer, render_mail, replace_diff

__all__ = [
    "DERIVABLE",
    "MAX_HEADER",
    "TRAILERS",
    "Ident",
    "MailHead",
    "Parts",
    "PatchDoc",
    "PatchFields",
    "add_trailers",
    "commit_of",
    "decode_transfer",
    "derive_fields",
    "read_doc",
    "render_mail",
    "replace_diff",
    "split_mbox",
    "split_parts",
]
