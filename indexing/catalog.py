"""The SemEval-2016 Task 3 files this project reads, by role, relative to ``<shared data>/semeval2016``
(../shared/data/README.md describes them). One list per role, and only here."""
from __future__ import annotations

_2016 = "SemEval2016-Task3-CQA-QL"
TRAIN_PART2 = f"train/{_2016}-train-part2.xml"
TRAIN_PART2_A = f"train/{_2016}-train-part2-subtaskA.xml"
TRAIN_PART1_A = f"train/{_2016}-train-part1-recovered-subtaskA.xml"
TRAIN_PART1_B = f"train/{_2016}-train-part1-recovered-subtaskB.xml"
TRAIN_2015 = "train2015/SemEval2015-Task3-CQA-QL-train-recovered-subtaskA.xml"
DEV_2015 = "train2015/SemEval2015-Task3-CQA-QL-dev-reformatted-excluding-2016-questions-cleansed.xml"
TEST_2015 = "train2015/SemEval2015-Task3-CQA-QL-test-reformatted-excluding-2016-questions-multiline.xml"


# Subtask D (Arabic medical cQA): the dev file and its gold; the test questions' text was never released.
ARABIC_DEV_D = "arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.gz"
ARABIC_DEV_D_GOLD = "arabic/SemEval2016-Task3-CQA-MD-dev-subtaskD.xml.relevancy"


def split_file(split: str) -> str:
    """The full 2016 file of dev or test (original questions, related threads, comments, all labels)."""
    return f"{split}/{_2016}-{split}.xml"


def split_file_a(split: str) -> str:
    """The subtask A file of dev (duplicates removed); test has none, its full file serves A."""
    return f"dev/{_2016}-dev-subtaskA.xml" if split == "dev" else split_file(split)


def gold_file(split: str, subtask: str) -> str:
    """The official gold (.relevancy) of a split and subtask."""
    return (f"{split}/{_2016}-{split}-subtaskA.xml.subtaskA.relevancy" if subtask == "A"
            else f"{split_file(split)}.subtask{subtask}.relevancy")


# Every 2016 English thread once (train, dev, test): what `make serve` ingests when the data is there and
# what the full-corpus and /search benchmarks index. Part 1 comes as questions only (B), then with comments (A).
CORPUS_FILES = (TRAIN_PART2, TRAIN_PART1_B, TRAIN_PART1_A, split_file("dev"), split_file("test"))
# Original questions with judged related threads: the search benchmarks' splits (train for fitting only).
# train-part2: the training questions whose related threads the corpus holds with their comments.
SEARCH_QUERY_FILES = {"train": (TRAIN_PART2, TRAIN_PART1_B), "train-part2": (TRAIN_PART2,),
                      "dev": (split_file("dev"),), "test": (split_file("test"),)}
# Subtask A training threads of the neural rankers; never 2016 dev or test.
NEURAL_TRAIN_FILES = (TRAIN_PART2_A, TRAIN_PART1_A, TRAIN_2015, DEV_2015, TEST_2015)
# Held out from the cross-encoder's training: the learned combination trains on its scores of unseen threads.
HELD_OUT_FILE = TEST_2015
# Unlabelled question-answer pairs of the translation LM of the given-candidate rankers.
TRANSLATION_TRAIN_FILES = (TRAIN_PART2, TRAIN_PART1_A, TRAIN_2015)
