"""A small sentence-similarity set written for the course's lab (notebook 08).

How it was made
---------------
One author wrote 24 groups of sentences for this course (none is copied from a corpus). Each
group has a base sentence and six partners, one for each grade of the rating scale used by the
SemEval semantic-textual-similarity tasks (Agirre et al., 2013):

====  ==========================================================================
5     the two sentences mean the same thing (a paraphrase)
4     mostly equivalent; an unimportant detail is added or differs
3     roughly equivalent, but an important detail differs (object, place, action)
2     not equivalent, but they share some details (same setting or actors)
1     not equivalent, only the topic is shared
0     different topics
====  ==========================================================================

The grades were fixed when the sentences were written, before any model was run on them, and
were not changed afterwards. Partners are built so that word overlap is a poor guide to the grade:
a grade-5 paraphrase often shares fewer words with the base than the grade-3 sentence does.

That gives 24 x 6 = 144 pairs. The groups are split in two: the even-numbered groups form the
*calibration* half (used to score heads), the odd-numbered groups the *evaluation* half (used to
measure what pruning costs), so no sentence is used for both.

The grades are one person's judgement on a single scale, integers only; treat correlations
measured on 72 pairs as having a sampling error of a few hundredths, and compare two models on
the same pairs with a paired bootstrap over the groups (``mha.spearman_difference_bootstrap``).
"""

from __future__ import annotations

#: (base sentence, [(partner, grade 5), (grade 4), (grade 3), (grade 2), (grade 1), (grade 0)])
GROUPS: list[tuple[str, list[str]]] = [
    ("A man is playing a guitar on the stage.", [
        "On the stage, a man plays the guitar.",
        "A man is playing an acoustic guitar on a small stage.",
        "A man is playing a violin on the stage.",
        "A woman is singing on the stage.",
        "The guitar shop closes at six.",
        "The soup needs more salt.",
    ]),
    ("The children are building a sandcastle on the beach.", [
        "On the beach, the kids are making a castle out of sand.",
        "Two children are building a big sandcastle on the beach.",
        "The children are building a snowman in the park.",
        "The children are swimming in the sea.",
        "The beach was crowded with tourists last summer.",
        "The bank raised its interest rates.",
    ]),
    ("The train to Berlin was delayed by two hours.", [
        "The Berlin train arrived two hours late.",
        "The train to Berlin was delayed by about two hours because of snow.",
        "The train to Berlin was delayed by ten minutes.",
        "The flight to Berlin was cancelled.",
        "Berlin is the capital of Germany.",
        "She painted the kitchen yellow.",
    ]),
    ("A woman is slicing an onion in the kitchen.", [
        "In the kitchen, a woman cuts an onion into slices.",
        "A woman is quickly slicing a red onion.",
        "A woman is peeling a potato in the kitchen.",
        "A man is cooking rice in the kitchen.",
        "Onions grow well in sandy soil.",
        "The team won the championship.",
    ]),
    ("The company reported record profits this year.", [
        "This year the firm announced its highest profits ever.",
        "The company reported record profits this year, mostly from overseas sales.",
        "The company reported slightly higher profits than last year.",
        "The company hired a new chief executive this year.",
        "Profits in the car industry are falling.",
        "The cat is sleeping on the sofa.",
    ]),
    ("A dog is chasing a ball across the grass.", [
        "Across the lawn, a dog runs after a ball.",
        "A brown dog is chasing a red ball across the grass.",
        "A dog is chasing a cat across the grass.",
        "A dog is sleeping on the grass.",
        "The grass in the park was cut yesterday.",
        "He forgot his password again.",
    ]),
    ("The museum will be closed on Monday for repairs.", [
        "Because of repairs, the museum is not open on Monday.",
        "The museum will be closed all of Monday while the roof is repaired.",
        "The museum will be closed on Monday for a private event.",
        "The museum will open a new exhibition on Monday.",
        "Many museums offer free entry to students.",
        "The river flooded the lower town.",
    ]),
    ("The patient was given antibiotics for the infection.", [
        "The doctors treated the patient's infection with antibiotics.",
        "The elderly patient was given strong antibiotics for the infection.",
        "The patient was given painkillers for the infection.",
        "The patient was sent home from the hospital.",
        "Antibiotics do not work against viruses.",
        "The concert starts at eight.",
    ]),
    ("Heavy rain caused flooding in the city centre.", [
        "The city centre flooded after a heavy downpour.",
        "Heavy rain overnight caused some flooding in the city centre.",
        "Heavy rain caused flooding in the villages north of the city.",
        "Heavy snow closed roads in the city centre.",
        "The city centre has many old buildings.",
        "She learned to play chess at the age of five.",
    ]),
    ("The students are taking an exam in the hall.", [
        "In the hall, the pupils are sitting an exam.",
        "Two hundred students are taking a maths exam in the hall.",
        "The teachers are preparing an exam in the hall.",
        "The students are eating lunch in the hall.",
        "Exams are usually held in June.",
        "The ship sank near the coast.",
    ]),
    ("A man is riding a bicycle down the hill.", [
        "A man rides his bike down the hill.",
        "A man in a helmet is riding a bicycle down a steep hill.",
        "A man is pushing a bicycle up the hill.",
        "A woman is driving a car down the hill.",
        "Bicycles are popular in the Netherlands.",
        "The bread is still in the oven.",
    ]),
    ("The government announced a new tax on sugary drinks.", [
        "A new tax on sweet soft drinks was announced by the government.",
        "The government announced a new tax on sugary drinks starting next year.",
        "The government announced a new tax on alcohol.",
        "The government banned advertising for fast food.",
        "Sugary drinks are bad for your teeth.",
        "The kitten climbed up the curtain.",
    ]),
    ("Two women are walking along the river.", [
        "Two women are taking a walk by the river.",
        "Two women and their dog are walking along the river.",
        "Two women are running along the river.",
        "Two men are fishing in the river.",
        "The river is wide near its mouth.",
        "The printer is out of paper.",
    ]),
    ("The library has extended its opening hours.", [
        "The library now stays open longer.",
        "The library has extended its opening hours during the exam period.",
        "The swimming pool has extended its opening hours.",
        "The library has bought many new books.",
        "Reading is a popular hobby.",
        "The engine makes a strange noise.",
    ]),
    ("A chef is preparing pasta in a restaurant kitchen.", [
        "In a restaurant kitchen, a cook is making pasta.",
        "A young chef is preparing fresh pasta in a busy restaurant kitchen.",
        "A chef is preparing a salad in a restaurant kitchen.",
        "A waiter is serving pasta to a customer.",
        "Italy is famous for its food.",
        "The satellite was launched in March.",
    ]),
    ("The football match was cancelled because of the storm.", [
        "The storm forced the football game to be called off.",
        "Saturday's football match was cancelled because of the storm.",
        "The football match was cancelled because of a strike.",
        "The football match ended in a draw.",
        "Storms are common in this region in autumn.",
        "He planted tomatoes in the garden.",
    ]),
    ("A girl is reading a book under a tree.", [
        "Under a tree, a girl reads a book.",
        "A young girl is reading a thick book under an old tree.",
        "A girl is writing a letter under a tree.",
        "A boy is climbing a tree.",
        "This book was printed in 1950.",
        "The price of oil rose sharply.",
    ]),
    ("The scientists discovered a new species of frog in the rainforest.", [
        "A previously unknown kind of frog was found in the rainforest by scientists.",
        "Scientists discovered a new, tiny species of frog in the Amazon rainforest.",
        "The scientists discovered a new species of snake in the rainforest.",
        "The scientists measured rainfall in the rainforest.",
        "Frogs lay their eggs in water.",
        "The meeting was moved to Thursday.",
    ]),
    ("The old bridge will be replaced next spring.", [
        "Next spring, a new bridge will replace the old one.",
        "The old wooden bridge will be replaced early next spring.",
        "The old bridge will be painted next spring.",
        "The new road will open next spring.",
        "The bridge crosses a narrow river.",
        "She drinks green tea every morning.",
    ]),
    ("A man is cleaning the windows of the house.", [
        "A man is washing the house's windows.",
        "An old man is cleaning the front windows of the house.",
        "A man is painting the windows of the house.",
        "A man is mowing the lawn in front of the house.",
        "The house was built a century ago.",
        "Stock markets fell in Asia.",
    ]),
    ("The airline lost my suitcase on the way to Rome.", [
        "My luggage went missing with the airline on my trip to Rome.",
        "The airline lost my blue suitcase on the flight to Rome.",
        "The airline damaged my suitcase on the way to Rome.",
        "The airline delayed my flight to Rome.",
        "Rome has many ancient churches.",
        "The baby is learning to walk.",
    ]),
    ("The baby is sleeping in her cot.", [
        "The infant is asleep in her crib.",
        "The baby has been sleeping peacefully in her cot all afternoon.",
        "The baby is crying in her cot.",
        "The mother is feeding the baby.",
        "Cots must meet safety standards.",
        "The volcano erupted last night.",
    ]),
    ("The police arrested two men after the robbery.", [
        "Two men were detained by police following the robbery.",
        "The police arrested two young men shortly after the bank robbery.",
        "The police questioned two men after the robbery.",
        "Two men robbed a jewellery shop.",
        "Crime rates fell last year.",
        "The flowers need water.",
    ]),
    ("A cat is drinking milk from a bowl.", [
        "A cat laps up milk from a bowl.",
        "A small grey cat is drinking milk from a white bowl.",
        "A cat is eating food from a bowl.",
        "A dog is drinking water from a bowl.",
        "Cats sleep for most of the day.",
        "The election results were announced.",
    ]),
]

#: the grade of the k-th partner in every group
GRADES = (5.0, 4.0, 3.0, 2.0, 1.0, 0.0)

SPLITS = ("all", "calibration", "evaluation")


def similarity_pairs(split: str = "all") -> list[tuple[str, str, float]]:
    """The course's sentence pairs as ``(sentence_a, sentence_b, grade)`` with grade in 0..5.

    ``split``: ``"all"`` (144 pairs), ``"calibration"`` (even-numbered groups, 72 pairs, for
    scoring heads) or ``"evaluation"`` (odd-numbered groups, 72 pairs, for measuring).
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    pairs = []
    for index, (base, partners) in enumerate(GROUPS):
        if split == "calibration" and index % 2:
            continue
        if split == "evaluation" and not index % 2:
            continue
        pairs.extend((base, partner, grade) for partner, grade in zip(partners, GRADES,
                                                                     strict=True))
    return pairs
