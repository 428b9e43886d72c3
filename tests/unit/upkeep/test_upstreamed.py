"""What proves a patch upstream: its lines where its hunks are (``change_present``), and
the rules' verdicts (proven or only suggested)."""

from __future__ import annotations

from patchkit.git.repo import CommitInfo
from patchkit.upkeep.upstreamed import Upstreamed, change_present, confirmed

DIFF = """\
diff --git a/src/m.c b/src/m.c
--- a/src/m.c
+++ b/src/m.c
@@ -1,6 +1,9 @@
 int alpha(int x) {
-    return x + 1;
+    if (x < 0) {
+        return fallback_for_negative(x);
+    }
+    return x + 2;
 }

 int beta(int x) {
"""
NEW = """\
// upstream moved things about since
int alpha(int x) {
    if (x < 0) {
        return fallback_for_negative(x);
    }
    return x + 2;
}

int beta(int x) {
    return x * 3;  // and changed this
}
"""
C = CommitInfo(sha="a" * 40, date="2025-07-18", subject="cuda : a fix (#14741)")


def test_a_change_whose_lines_are_there_is_present() -> None:
    assert change_present(DIFF, {"src/m.c": NEW})


def test_a_change_missing_a_line_or_keeping_a_removed_one_is_not() -> None:
    assert not change_present(
        DIFF, {"src/m.c": NEW.replace("        return fallback_for_negative(x);\n", "")}
    )
    kept = NEW.replace("    return x + 2;\n", "    return x + 2;\n    return x + 1;\n")
    assert not change_present(DIFF, {"src/m.c": kept})
    assert not change_present(DIFF, {})  # the file is gone
    # the lines, but far apart: not where the hunk is
    far = NEW.replace("    }\n    return x + 2;\n", "    }\n" + "// filler\n" * 200 + "    return x + 2;\n")
    assert not change_present(DIFF, {"src/m.c": far})


def test_a_tiny_change_tells_nothing() -> None:
    tiny = "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n a\n-b = 1;\n+b = 2;\n"
    assert not change_present(tiny, {"f": "a\nb = 2;\n"})


def test_a_suggestion_proves_nothing_until_its_effect_is_there() -> None:
    pr = Upstreamed(file="0021-x.patch", rule="pull-request", commit=C, detail="#14741")
    assert not pr.proven
    assert pr.describe().startswith("perhaps upstream (pull-request #14741; only its pull request number")
    for rule in ("patch-id", "cherry-pick", "effect", "present"):
        assert Upstreamed(file="f", rule=rule, commit=C).proven
    both = confirmed(pr, Upstreamed(file="0021-x.patch", rule="effect", commit=None))
    assert both.proven and both.commit == C
    assert both.describe() == f"already upstream (effect and pull-request #14741): {C.short} {C.subject}"
