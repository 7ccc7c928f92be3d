"""Writes configs/panels/mcp_fs_panel_v1.jsonl: a held-out panel for npm's MCP filesystem server (issue 76.5), 48
tasks written by hand here, apart from every generator, worked example and prompt (configs/mcp_filesystem.yaml's
two examples ask about the notes folder and a work/todo.txt; no task here uses their wording). Six kinds of 8 tasks
on the seed sandbox (examples/mcp_seed: shopping.txt "milk\\neggs", notes/monday.txt "meeting at 10"): read a file,
list a folder, make a folder, write a file, move a file, and make a folder then write a file in it. Each is scored by
the server's end state and the reference calls' outputs (env/mcp.py: evaluate), never by a model. Version 1 is fixed:
a change is a new file.

    .venv/bin/python benchmarks/evidence/make_mcp_fs_panel.py
"""

from __future__ import annotations

from pathlib import Path

from evolvekit.types import Task, TaskSource, ToolCall

OUT = Path(__file__).resolve().parents[2] / "configs" / "panels" / "mcp_fs_panel_v1.jsonl"


def _call(name: str, **arguments: str) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


def tasks() -> list[tuple[str, list[ToolCall]]]:
    out: list[tuple[str, list[ToolCall]]] = []
    shop, monday = "/sandbox/shopping.txt", "/sandbox/notes/monday.txt"
    for q in [
        "Show me what shopping.txt says.",
        "Read the shopping list file for me.",
        "What items are written in /sandbox/shopping.txt?",
        "Open shopping.txt and tell me its contents.",
    ]:
        out.append((q, [_call("read_text_file", path=shop)]))
    for q in [
        "What does the Monday note say?",
        "Read /sandbox/notes/monday.txt.",
        "Tell me the text of monday.txt inside notes.",
        "Print the contents of the note for Monday.",
    ]:
        out.append((q, [_call("read_text_file", path=monday)]))
    for q in [
        "List the files at the top of the sandbox.",
        "Which entries does /sandbox contain?",
        "Show the contents of the sandbox root directory.",
        "What is stored directly under /sandbox?",
    ]:
        out.append((q, [_call("list_directory", path="/sandbox")]))
    for q in [
        "List /sandbox/notes.",
        "Which files are kept under the notes directory?",
        "Show me the entries of /sandbox/notes.",
        "Give a listing of the notes subfolder.",
    ]:
        out.append((q, [_call("list_directory", path="/sandbox/notes")]))
    for q, d in [
        ("Create a directory named photos in the sandbox.", "photos"),
        ("Make a new folder /sandbox/receipts.", "receipts"),
        ("I need an empty folder called drafts at /sandbox/drafts.", "drafts"),
        ("Add a directory /sandbox/archive.", "archive"),
        ("Set up a folder named music under /sandbox.", "music"),
        ("Please create the directory /sandbox/letters.", "letters"),
        ("Make a folder for recipes at /sandbox/recipes.", "recipes"),
        ("Create /sandbox/backup as a new directory.", "backup"),
    ]:
        out.append((q, [_call("create_directory", path=f"/sandbox/{d}")]))
    for q, f, c in [
        ("Write 'call the dentist' into /sandbox/reminder.txt.", "reminder.txt", "call the dentist"),
        ("Save the text 'hello world' as /sandbox/greeting.txt.", "greeting.txt", "hello world"),
        ("Create /sandbox/notes/tuesday.txt containing 'gym at 7'.", "notes/tuesday.txt", "gym at 7"),
        ("Put 'pay rent' in a file called /sandbox/bills.txt.", "bills.txt", "pay rent"),
        ("Store the word 'banana' in /sandbox/fruit.txt.", "fruit.txt", "banana"),
        ("Write a file /sandbox/plan.txt that says 'finish report'.", "plan.txt", "finish report"),
        ("Make /sandbox/notes/friday.txt with the text 'lunch with Ana'.", "notes/friday.txt", "lunch with Ana"),
        ("Save 'water the plants' to /sandbox/chores.txt.", "chores.txt", "water the plants"),
    ]:
        out.append((q, [_call("write_file", path=f"/sandbox/{f}", content=c)]))
    for q, src, dst in [
        ("Rename shopping.txt to groceries.txt.", shop, "/sandbox/groceries.txt"),
        ("Move /sandbox/shopping.txt into the notes folder.", shop, "/sandbox/notes/shopping.txt"),
        ("Change the name of /sandbox/shopping.txt to list.txt.", shop, "/sandbox/list.txt"),
        ("Move shopping.txt to /sandbox/old_shopping.txt.", shop, "/sandbox/old_shopping.txt"),
        ("Move the Monday note up to /sandbox/monday.txt.", monday, "/sandbox/monday.txt"),
        ("Rename /sandbox/notes/monday.txt to meeting.txt in the same folder.", monday, "/sandbox/notes/meeting.txt"),
        ("Move notes/monday.txt to /sandbox/agenda.txt.", monday, "/sandbox/agenda.txt"),
        ("Rename the file monday.txt under notes to week1.txt.", monday, "/sandbox/notes/week1.txt"),
    ]:
        out.append((q, [_call("move_file", source=src, destination=dst)]))
    for q, d, f, c in [
        (
            "Create a folder /sandbox/trip and write 'pack bags' in /sandbox/trip/list.txt.",
            "trip",
            "list.txt",
            "pack bags",
        ),
        ("Make /sandbox/ideas, then save 'new app' as /sandbox/ideas/one.txt.", "ideas", "one.txt", "new app"),
        ("Set up /sandbox/school and put 'math test' in /sandbox/school/exam.txt.", "school", "exam.txt", "math test"),
        (
            "First create /sandbox/garden, then write 'tomatoes' to /sandbox/garden/seeds.txt.",
            "garden",
            "seeds.txt",
            "tomatoes",
        ),
        ("New directory /sandbox/books with a file titles.txt holding 'Dune'.", "books", "titles.txt", "Dune"),
        (
            "Create the folder /sandbox/car and a file /sandbox/car/service.txt saying 'oil change'.",
            "car",
            "service.txt",
            "oil change",
        ),
        (
            "Make a directory /sandbox/party and write 'invite Sam' into /sandbox/party/guests.txt.",
            "party",
            "guests.txt",
            "invite Sam",
        ),
        (
            "Add /sandbox/health and store 'walk daily' in /sandbox/health/goals.txt.",
            "health",
            "goals.txt",
            "walk daily",
        ),
    ]:
        out.append(
            (
                q,
                [
                    _call("create_directory", path=f"/sandbox/{d}"),
                    _call("write_file", path=f"/sandbox/{d}/{f}", content=c),
                ],
            )
        )
    return out


def main() -> None:
    rows = [
        Task(task_id=f"mcp-fs-panel-v1-{i:04d}", env_name="mcp", query=q, reference_solution=[calls],
             source=TaskSource.REAL, metadata={"panel": "mcp_fs_panel_v1"})
        for i, (q, calls) in enumerate(tasks())
    ]  # fmt: skip
    assert len(rows) == 48 and len({t.query for t in rows}) == 48
    OUT.write_text("".join(t.model_dump_json() + "\n" for t in rows))
    print(f"{OUT}: {len(rows)} tasks")


if __name__ == "__main__":
    main()
