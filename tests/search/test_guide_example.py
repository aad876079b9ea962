"""The policy-search guide's code-policy example runs as printed: the imports it names exist,
the candidate passes the check, and it scores in the sandbox without an error."""

from __future__ import annotations

import re
from pathlib import Path

GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "policy-search.md"


def test_the_guides_code_policy_example_runs_as_printed(capsys) -> None:
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    example = next(b for b in blocks if "CodePolicy(" in b)
    example = example.replace("seeds=[1, 2]", "seeds=[1]")  # one seed is enough to show it
    namespace: dict[str, object] = {}
    exec(compile(example, str(GUIDE), "exec"), namespace)
    table = namespace["table"]
    assert list(table.error) == [""], table.error.tolist()
    assert table.fitness.iloc[0] > 0
    assert "mine" in capsys.readouterr().out
