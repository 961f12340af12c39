"""A small fictional wiki, generated from a seed, for the deep-search pipeline of paper section 2.2.1.

The paper builds multi-hop questions from Wikipedia in three steps (its Figure 2):
  1. time-aware head-entity selection: entities "updated within the past six months";
  2. an entity-relation graph and conditional random walks over it, giving relational paths of a
     predefined length, which an LLM turns into an intricate question;
  3. trajectory synthesis with search / visit / python tools and turn-level judgment (search_agent.py).
This module is steps 1 and 2 on a world small enough to ship with the project: a few hundred people,
companies, cities, countries, universities, products and prizes, each with typed relations, numeric
attributes, a last-modified date and a short article whose sentences state its relations. Everything is
derived from one `random.Random(seed)`, so the same seed gives byte-identical files.

    python data_synth.py world --out data/toy      # writes world.json, search_questions.jsonl and
                                                    # search_sft.jsonl (the last through search_agent.py)
    python data_synth.py world --out /tmp/toy --rewrite-endpoint http://127.0.0.1:8000/v1 --rewrite-model M

Covered: world generation, the graph (functional relations and their unique inverses), time-aware head
selection, conditional random walks of a given length, template question synthesis with gold answer,
gold path and a train/test split.
The paper's LLM question writing ("fed into a robust LLM to synthesize intricate questions") is the optional
`rewrite_question` over any OpenAI-compatible endpoint (`--rewrite-endpoint URL --rewrite-model NAME`), with
checks that reject rewrites naming the answer or an intermediate entity; the shipped files use the templates
only (correct, plain questions), so they regenerate offline and byte for byte.
Departure from the paper: walks use only relations whose object is unique for its subject (born_in,
capital, founded_by, ...), so every question has exactly one gold answer; Wikipedia walks need an LLM or a
checker for that.
"""
import datetime
import json
import random
import re

from nanbeige41.data import read_jsonl

BASE_URL = "https://toywiki.org/wiki/"
REFERENCE_DATE = datetime.date(2026, 10, 31)  # "today" for the fictional world; dates are relative to it
RECENT_MONTHS = 6                              # the paper's "updated within the past six months"

# -----------------------------------------------------------------------------
# Relations. Every relation here is functional (one object per subject). Those with an inverse name have a
# unique inverse too (a city has one mayor and that person is mayor of one city), so walks may use both
# directions. np: noun phrase for the object given the subject phrase {x}; q: question asking for it.

RELATIONS = {
    #  name              subject       object        inverse          noun phrase / question
    "born_in":          ("person",     "city",       None,
                         "the birthplace of {x}", "In which city was {x} born?"),
    "educated_at":      ("person",     "university", None,
                         "the university where {x} studied", "At which university did {x} study?"),
    "won":              ("person",     "prize",      None,
                         "the prize won by {x}", "Which prize did {x} win?"),
    "located_in":       ("city",       "country",    None,
                         "the country in which {x} lies", "In which country is {x}?"),
    "mayor":            ("city",       "person",     "mayor_of",
                         "the mayor of {x}", "Who is the mayor of {x}?"),
    "mayor_of":         ("person",     "city",       "mayor",
                         "the city whose mayor is {x}", "Of which city is {x} the mayor?"),
    "capital":          ("country",    "city",       "capital_of",
                         "the capital of {x}", "What is the capital of {x}?"),
    "capital_of":       ("city",       "country",    "capital",
                         "the country whose capital is {x}", "Of which country is {x} the capital?"),
    "campus_in":        ("university", "city",       None,
                         "the city where {x} is located", "In which city is {x} located?"),
    "headquartered_in": ("company",    "city",       None,
                         "the city where {x} is headquartered", "In which city is {x} headquartered?"),
    "founded_by":       ("company",    "person",     "founder_of",
                         "the founder of {x}", "Who founded {x}?"),
    "founder_of":       ("person",     "company",    "founded_by",
                         "the company founded by {x}", "Which company did {x} found?"),
    "ceo":              ("company",    "person",     "ceo_of",
                         "the chief executive of {x}", "Who is the chief executive of {x}?"),
    "ceo_of":           ("person",     "company",    "ceo",
                         "the company led by {x}", "Which company does {x} lead as chief executive?"),
    "made_by":          ("product",    "company",    None,
                         "the maker of {x}", "Which company makes {x}?"),
    "designed_by":      ("product",    "person",     "designer_of",
                         "the designer of {x}", "Who designed {x}?"),
    "designer_of":      ("person",     "product",    "designed_by",
                         "the product designed by {x}", "Which product did {x} design?"),
    "named_after":      ("prize",      "person",     "namesake_of",
                         "the person {x} is named after", "After whom is {x} named?"),
    "namesake_of":      ("person",     "prize",      "named_after",
                         "the prize named after {x}", "Which prize is named after {x}?"),
    "awarded_by":       ("prize",      "university", "awards",
                         "the university that awards {x}", "Which university awards {x}?"),
    "awards":           ("university", "prize",      "awarded_by",
                         "the prize awarded by {x}", "Which prize does {x} award?"),
}
# Attributes end a walk: the answer is a value, not an entity (numbers exercise the GAIA number rule).
ATTRIBUTES = {
    #  name            subject       question                                noun phrase
    "birth_year":    ("person",     "In what year was {x} born?",           "the birth year of {x}"),
    "founded_year":  ("company",    "In what year was {x} founded?",        "the founding year of {x}"),
    "opened_year":   ("university", "In what year was {x} founded?",        "the founding year of {x}"),
    "launch_year":   ("product",    "In what year was {x} launched?",       "the launch year of {x}"),
    "population":    ("city",       "What is the population of {x}?",       "the population of {x}"),
    "language":      ("country",    "What is the official language of {x}?", "the official language of {x}"),
    "first_awarded": ("prize",      "In what year was {x} first awarded?",  "the year {x} was first awarded"),
}
# Words an expert would add to a search query to find the sentence stating a relation (search_agent.py).
SEARCH_KEYWORDS = {
    "born_in": "born", "educated_at": "studied at", "won": "won the", "located_in": "city in",
    "mayor": "mayor of", "mayor_of": "mayor of", "capital": "capital", "capital_of": "capital",
    "campus_in": "university located in", "headquartered_in": "headquartered in",
    "founded_by": "founded by", "founder_of": "founded", "ceo": "chief executive",
    "ceo_of": "chief executive", "made_by": "made by", "designed_by": "designed by",
    "designer_of": "designed", "named_after": "named after", "namesake_of": "named after",
    "awarded_by": "awarded by", "awards": "awards", "birth_year": "born", "founded_year": "founded in",
    "opened_year": "founded in", "launch_year": "launched in", "population": "population",
    "language": "official language", "first_awarded": "first awarded",
}

# -----------------------------------------------------------------------------
# World generation

SYLLABLES = ["ka", "ve", "lor", "min", "ta", "ris", "do", "bel", "an", "or", "qua", "zen", "mi", "sol",
             "thar", "en", "ul", "bra", "vik", "nes", "po", "lia", "gar", "fen", "osk", "ri", "te", "mar",
             "lu", "sen", "dor", "ix", "ha", "mo", "pel", "ru", "sa", "tov", "wen", "yl"]
GIVEN_NAMES = ["Ada", "Boris", "Clara", "Darius", "Elin", "Felix", "Greta", "Hugo", "Ines", "Jonas",
               "Kira", "Leon", "Mira", "Nils", "Olga", "Pavel", "Rosa", "Stefan", "Talia", "Ulrich",
               "Vera", "Walter", "Yara", "Zoran", "Anouk", "Bruno", "Cecile", "Emil", "Frida", "Ivo"]
CITY_SUFFIXES = ["", "", "port", "ford", "holm", "vale", "burg", "mouth"]
COUNTRY_SUFFIXES = ["ia", "land", "ovia", "ara", "estan"]
INDUSTRIES = [("software", "Systems"), ("robotics", "Dynamics"), ("food", "Foods"), ("energy", "Power"),
              ("aerospace", "Aero"), ("biotech", "Bio"), ("automotive", "Motors"), ("optics", "Optics")]
PRODUCT_KINDS = {"software": "database", "robotics": "robot arm", "food": "snack bar", "energy": "battery",
                 "aerospace": "drone", "biotech": "test kit", "automotive": "car", "optics": "camera lens"}
PRODUCT_WORDS = ["Lumen", "Vector", "Orbit", "Nova", "Pulse", "Atlas", "Echo", "Prism", "Quill", "Zephyr"]
FIELDS = ["Physics", "Chemistry", "Medicine", "Mathematics", "Economics", "Engineering", "Literature",
          "Architecture", "Astronomy", "Ecology"]
OCCUPATIONS = {"mayor": "politician", "founder": "entrepreneur", "ceo": "executive", "designer": "engineer",
               "namesake": "scholar", "scientist": "scientist"}


def _word(rng, n_syllables):
    return "".join(rng.choice(SYLLABLES) for _ in range(n_syllables)).capitalize()


def _unique(rng, used, make):
    # Names must be unique across the whole world: a question names its head entity and nothing else.
    while True:
        name = make(rng)
        if name not in used and len(name) >= 4:
            used.add(name)
            return name


def fresh_world(seed):
    """A freshly generated world for the toy agent's training and held-out evaluation (never seed 0, the shipped
    world): every name in it is new, first names included. With the shipped world's 30 listed first names, a toy
    model guesses a listed name from its prior instead of copying the question's ("Cecile Minpo" for "Olga Minpo";
    README, "The agent stage"), and a name it can guess is one it never learns to copy."""
    if seed == 0:
        raise ValueError("world seed 0 is the shipped world")
    return generate_world(seed, given_names=None)


def slug(title):
    return re.sub(r"[^A-Za-z0-9]+", "_", title).strip("_")


def _a(word):
    return ("an " if word[0] in "aeiou" else "a ") + word


def _join(names):
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def generate_world(seed=0, n_countries=8, n_cities=40, n_universities=12, n_companies=40, n_products=50,
                   n_prizes=10, n_people_per_role=35, given_names=GIVEN_NAMES):
    """Build the world: a dict with `entities` (list) in a fixed order; same seed -> same world.
    given_names: the list people's first names are drawn from; None draws the world's own 30 from syllables
    (`fresh_world`)."""
    rng = random.Random(seed)
    if given_names is None:
        given_names = [_word(rng, 2) for _ in range(len(GIVEN_NAMES))]
    used = set()  # membership tests only; never iterated, so hash order cannot leak into the output
    ents = {}     # id -> entity, insertion-ordered

    def add(etype, title, **attrs):
        eid = slug(title)
        ents[eid] = {"id": eid, "type": etype, "title": title, "url": BASE_URL + eid,
                     "attributes": attrs, "relations": {}, "mentions": []}
        return eid

    countries = [add("country", _unique(rng, used, lambda r: _word(r, 2) + r.choice(COUNTRY_SUFFIXES)),
                     language=_unique(rng, used, lambda r: _word(r, 2) + r.choice(["ish", "ese", "ic"])))
                 for _ in range(n_countries)]
    cities = [add("city", _unique(rng, used, lambda r: _word(r, r.choice([2, 3])) + r.choice(CITY_SUFFIXES)),
                  population=rng.randrange(20, 2000) * 1000 + rng.randrange(1, 1000))
              for _ in range(n_cities)]
    for i, c in enumerate(cities):  # every country gets cities; the first city of each is its capital
        country = countries[i % n_countries]
        ents[c]["relations"]["located_in"] = country
        if i < n_countries:
            ents[country]["relations"]["capital"] = c
            ents[c]["relations"]["capital_of"] = country

    universities = []
    for _ in range(n_universities):
        city = rng.choice(cities)
        title = f"University of {ents[city]['title']}"
        if rng.random() < 0.5 or title in used:
            title = _unique(rng, used, lambda r: _word(r, 2) + " Institute of Technology")
        used.add(title)
        u = add("university", title, opened_year=rng.randrange(1820, 1990))
        ents[u]["relations"]["campus_in"] = city
        universities.append(u)

    # People come in roles so that the inverse relations stay unique (one mayor per city, one founder per
    # company, ...). Surnames are unique; articles always use the full name.
    people = {}
    for role in ["namesake", "mayor", "founder", "ceo", "designer", "scientist"]:
        people[role] = []
        for _ in range(n_people_per_role):
            surname = _unique(rng, used, lambda r: _word(r, r.choice([2, 3])))
            title = f"{rng.choice(given_names)} {surname}"
            born = rng.randrange(1780, 1880) if role == "namesake" else rng.randrange(1940, 1996)
            p = add("person", title, birth_year=born, occupation=OCCUPATIONS[role])
            ents[p]["relations"]["born_in"] = rng.choice(cities)
            ents[p]["relations"]["educated_at"] = rng.choice(universities)
            people[role].append(p)

    for city, mayor in zip(rng.sample(cities, len(people["mayor"])), people["mayor"]):
        ents[city]["relations"]["mayor"] = mayor
        ents[mayor]["relations"]["mayor_of"] = city

    companies = []
    founders = rng.sample(people["founder"], min(n_companies, n_people_per_role))
    ceos = rng.sample(people["ceo"], min(n_companies, n_people_per_role))
    for i in range(n_companies):
        industry, suffix = rng.choice(INDUSTRIES)
        title = _unique(rng, used, lambda r: _word(r, 2) + " " + suffix)
        co = add("company", title, industry=industry)
        ents[co]["relations"]["headquartered_in"] = rng.choice(cities)
        if i < len(founders):
            f = founders[i]
            ents[co]["relations"]["founded_by"] = f
            ents[f]["relations"]["founder_of"] = co
            ents[co]["attributes"]["founded_year"] = ents[f]["attributes"]["birth_year"] + rng.randrange(22, 40)
        else:
            ents[co]["attributes"]["founded_year"] = rng.randrange(1960, 2020)
        if i < len(ceos):
            ents[co]["relations"]["ceo"] = ceos[i]
            ents[ceos[i]]["relations"]["ceo_of"] = co
        companies.append(co)

    designers = list(people["designer"])
    for i in range(n_products):
        co = companies[i % n_companies]
        kind = PRODUCT_KINDS[ents[co]["attributes"]["industry"]]
        stem = ents[co]["title"].split()[0]
        title = _unique(rng, used, lambda r: f"{stem} {r.choice(PRODUCT_WORDS)} {r.randrange(2, 9)}")
        launched = min(2026, ents[co]["attributes"]["founded_year"] + rng.randrange(1, 15))
        p = add("product", title, kind=kind, launch_year=launched)
        ents[p]["relations"]["made_by"] = co
        if i < len(designers):
            ents[p]["relations"]["designed_by"] = designers[i]
            ents[designers[i]]["relations"]["designer_of"] = p

    prizes = []
    awarding = rng.sample(universities, n_prizes)
    for i in range(n_prizes):
        namesake = people["namesake"][i]
        surname = ents[namesake]["title"].split()[1]
        title = f"{surname} Prize for {FIELDS[i % len(FIELDS)]}"
        used.add(title)
        z = add("prize", title, first_awarded=ents[namesake]["attributes"]["birth_year"] + rng.randrange(60, 120))
        ents[z]["relations"]["named_after"] = namesake
        ents[namesake]["relations"]["namesake_of"] = z
        ents[z]["relations"]["awarded_by"] = awarding[i]
        ents[awarding[i]]["relations"]["awards"] = z
        prizes.append(z)
    winners = people["scientist"] + rng.sample(people["designer"] + people["founder"], 20)
    for p in winners:
        z = rng.choice(prizes)
        earliest = max(ents[z]["attributes"]["first_awarded"], ents[p]["attributes"]["birth_year"] + 28)
        ents[p]["relations"]["won"] = z
        ents[p]["attributes"]["won_year"] = rng.randrange(earliest, max(earliest + 1, 2026))

    # Distractor mentions: non-functional facts that name other entities, so a query matches several pages.
    for co in companies:
        if rng.random() < 0.6:
            ents[co]["mentions"].append(f"In {rng.randrange(1990, 2026)}, {ents[co]['title']} opened a "
                                        f"research office in {ents[rng.choice(cities)]['title']}.")
    for p in people["scientist"] + people["designer"]:
        if rng.random() < 0.5:
            ents[p]["mentions"].append(f"{ents[p]['title']} once lectured at "
                                       f"{ents[rng.choice(universities)]['title']}.")

    # Last-modified dates over two years before the reference date; about a third are recent (< 6 months).
    for e in ents.values():
        age_days = rng.randrange(0, 180) if rng.random() < 0.35 else rng.randrange(190, 730)
        e["last_modified"] = (REFERENCE_DATE - datetime.timedelta(days=age_days)).isoformat()
    for e in ents.values():
        e["article"] = write_article(e, ents)
        del e["mentions"]
    return {"seed": seed, "reference_date": REFERENCE_DATE.isoformat(), "base_url": BASE_URL,
            "entities": list(ents.values())}


def write_article(e, ents):
    """The page text: one sentence per fact, each naming its subject in full so any sentence stands alone
    as a search snippet. Facts appear on both ends of a relation (the company page names its founder and
    the founder's page names the company)."""
    t, a, r = e["title"], e["attributes"], e["relations"]
    name = lambda eid: ents[eid]["title"]
    back = lambda rel: [x["title"] for x in ents.values() if x["relations"].get(rel) == e["id"]]
    s = []
    if e["type"] == "person":
        home = name(ents[r["born_in"]]["relations"]["located_in"])
        s.append(f"{t} (born {a['birth_year']}) is {_a(a['occupation'])} from {home}.")
        s.append(f"{t} was born in {name(r['born_in'])} in {a['birth_year']}.")
        s.append(f"{t} studied at {name(r['educated_at'])}.")
        if "mayor_of" in r:
            s.append(f"{t} is the mayor of {name(r['mayor_of'])}.")
        if "founder_of" in r:
            s.append(f"{t} founded {name(r['founder_of'])} in {ents[r['founder_of']]['attributes']['founded_year']}.")
        if "ceo_of" in r:
            s.append(f"{t} is the chief executive of {name(r['ceo_of'])}.")
        if "designer_of" in r:
            s.append(f"{t} designed the {name(r['designer_of'])}.")
        if "won" in r:
            s.append(f"{t} won the {name(r['won'])} in {a['won_year']}.")
        if "namesake_of" in r:
            s.append(f"The {name(r['namesake_of'])} is named after {t}.")
    elif e["type"] == "city":
        s.append(f"{t} is a city in {name(r['located_in'])}.")
        s.append(f"{t} has a population of {a['population']:,}.")
        if "capital_of" in r:
            s.append(f"{t} is the capital of {name(r['capital_of'])}.")
        if "mayor" in r:
            s.append(f"The mayor of {t} is {name(r['mayor'])}.")
        hq = back("headquartered_in")
        if hq:
            s.append(f"Companies headquartered in {t} include {_join(hq)}.")
        for u in back("campus_in"):
            s.append(f"{u} is a university located in {t}.")
    elif e["type"] == "country":
        s.append(f"{t} is a country whose capital is {name(r['capital'])}.")
        s.append(f"The official language of {t} is {a['language']}.")
        s.append(f"Cities in {t} include {_join(back('located_in'))}.")
    elif e["type"] == "university":
        s.append(f"{t} is a university located in {name(r['campus_in'])}.")
        s.append(f"{t} was founded in {a['opened_year']}.")
        if "awards" in r:
            s.append(f"{t} awards the {name(r['awards'])}.")
        alumni = back("educated_at")[:4]
        if alumni:
            s.append(f"Alumni of {t} include {_join(alumni)}.")
    elif e["type"] == "company":
        s.append(f"{t} is {_a(a['industry'])} company headquartered in {name(r['headquartered_in'])}.")
        if "founded_by" in r:
            s.append(f"{t} was founded in {a['founded_year']} by {name(r['founded_by'])}.")
        else:
            s.append(f"{t} was founded in {a['founded_year']}.")
        if "ceo" in r:
            s.append(f"The chief executive of {t} is {name(r['ceo'])}.")
        products = back("made_by")
        if products:
            s.append(f"Products made by {t} include the {_join(products)}.")
    elif e["type"] == "product":
        s.append(f"The {t} is {_a(a['kind'])} made by {name(r['made_by'])}.")
        s.append(f"The {t} was launched in {a['launch_year']}.")
        if "designed_by" in r:
            s.append(f"The {t} was designed by {name(r['designed_by'])}.")
    elif e["type"] == "prize":
        s.append(f"The {t} is a prize awarded by {name(r['awarded_by'])}.")
        s.append(f"The {t} is named after {name(r['named_after'])}.")
        s.append(f"The {t} was first awarded in {a['first_awarded']}.")
        winners = [f"{x['title']} ({x['attributes']['won_year']})" for x in ents.values()
                   if x["relations"].get("won") == e["id"]][:5]
        if winners:
            s.append(f"Winners of the {t} include {_join(winners)}.")
    s.extend(e["mentions"])
    return " ".join(s)


# -----------------------------------------------------------------------------
# Graph, head selection, random walks, questions

def build_graph(world):
    """Adjacency over functional relations: {entity id: [(relation, object id), ...]} in a fixed order."""
    graph = {e["id"]: [] for e in world["entities"]}
    for e in world["entities"]:
        for rel, obj in e["relations"].items():
            graph[e["id"]].append((rel, obj))
    return graph


def recent_entities(world, months=RECENT_MONTHS, reference_date=None):
    """Time-aware head-entity selection: ids of entities modified within `months` of the reference date."""
    ref = datetime.date.fromisoformat(reference_date or world["reference_date"])
    cutoff = ref - datetime.timedelta(days=round(months * 30.44))
    return [e["id"] for e in world["entities"] if datetime.date.fromisoformat(e["last_modified"]) >= cutoff]


def random_walk(graph, head, length, rng, end_types=None, entities=None):
    """Conditional random walk of exactly `length` relation hops from `head`, or None when none exists.

    Conditions: no entity visited twice, no hop straight back along the inverse of the previous hop, and
    (when `end_types` is given) the last entity's type in `end_types`. Depth-first with shuffled edges,
    so the walk is uniform-ish among the paths that satisfy the conditions, and it never dead-ends.
    Returns [(relation, entity id), ...] of length `length`.
    """
    def extend(path, visited):
        if len(path) == length:
            last = path[-1][1] if path else head
            return path if end_types is None or entities[last]["type"] in end_types else None
        node = path[-1][1] if path else head
        previous = path[-1][0] if path else None
        edges = list(graph[node])
        rng.shuffle(edges)
        for rel, obj in edges:
            if obj in visited or (previous and RELATIONS[previous][2] == rel):
                continue
            found = extend(path + [(rel, obj)], visited | {obj})
            if found:
                return found
        return None
    return extend([], {head})


def synthesize_question(world_index, head, walk, attribute=None):
    """Template question from a walk: nested noun phrases for every hop but the last, which is asked.

    e.g. head=Ada Solmin, walk=[born_in -> Kessa, located_in -> Velmoria]
         -> "In which country is the birthplace of Ada Solmin?"  answer "Velmoria".
    With `attribute`, the walk's end entity is asked for that attribute instead ("In what year ...").
    """
    phrase = world_index[head]["title"]
    hops = list(walk)
    if attribute is None:
        *hops, (last_rel, last_obj) = hops
    for rel, _ in hops:
        phrase = RELATIONS[rel][3].format(x=phrase)
    if attribute is None:
        return RELATIONS[last_rel][4].format(x=phrase), world_index[last_obj]["title"]
    end = walk[-1][1] if walk else head
    value = world_index[end]["attributes"][attribute]
    return ATTRIBUTES[attribute][1].format(x=phrase), str(value)


def synthesize_questions(world, n_questions=800, seed=0, hop_weights=None, test_fraction=0.2):
    """Multi-hop questions with gold answers and paths, heads from the time-aware selection.

    hop_weights: {hops: weight}; a question's hops count an attribute lookup as a hop too.
    """
    rng = random.Random(seed)
    hop_weights = hop_weights or {1: 1, 2: 4, 3: 4, 4: 2}
    index = {e["id"]: e for e in world["entities"]}
    graph = build_graph(world)
    heads = recent_entities(world)
    questions, seen = [], set()
    attempts = 0
    while len(questions) < n_questions and attempts < 50 * n_questions:
        attempts += 1
        hops = rng.choices(list(hop_weights), weights=list(hop_weights.values()))[0]
        head = rng.choice(heads)
        use_attribute = rng.random() < 0.3
        walk = random_walk(graph, head, hops - 1 if use_attribute else hops, rng, entities=index)
        if walk is None:
            continue
        attribute = None
        if use_attribute:
            end_type = index[walk[-1][1] if walk else head]["type"]
            attribute = rng.choice([k for k, (t, *_) in ATTRIBUTES.items() if t == end_type
                                    and k in index[walk[-1][1] if walk else head]["attributes"]])
        key = (head, tuple(walk), attribute)
        if key in seen:
            continue
        seen.add(key)
        question, answer = synthesize_question(index, head, walk, attribute)
        path = [{"relation": rel, "entity": obj, "title": index[obj]["title"]} for rel, obj in walk]
        if attribute:
            path.append({"relation": attribute, "entity": None, "title": answer})
        questions.append({"id": f"toy-{len(questions):04d}", "question": question, "answer": answer,
                          "hops": hops, "head": head, "head_title": index[head]["title"],
                          "head_last_modified": index[head]["last_modified"], "path": path,
                          "split": "test" if rng.random() < test_fraction else "train"})
    return questions


def worked_chain(world_index, q):
    """A multi-hop question worked through in plain text, the way the search expert reasons (search_agent.py):
    for each hop, the fact it needs, the search it would run, and the sentence of the known entity's page that
    states the fact; then the answer. Dense in the two choices a search agent makes (the question's entity for
    the first query, the newly found entity for the next) at ~80 tokens a question, where an agent trajectory
    spends ~750 on one. None when a page does not state a hop in one sentence."""
    lines, known = [f"Question: {q['question']}"], world_index[q["head"]]
    for hop in q["path"]:
        target = hop["title"]
        targets = [target, f"{int(target):,}"] if target.isdigit() else [target]
        table = RELATIONS if hop["relation"] in RELATIONS else ATTRIBUTES
        need = table[hop["relation"]][3 if table is RELATIONS else 2].format(x=known["title"])
        fact = next((s for s in re.split(r"(?<=[.!?])\s+", known["article"])
                     if known["title"] in s and any(t in s for t in targets)), None)
        if fact is None:
            return None
        lines += [f"I need {need}.", f"Search: {known['title']} {SEARCH_KEYWORDS[hop['relation']]}", f"Found: {fact}"]
        known = world_index[hop["entity"]] if hop["entity"] else known
    return "\n".join(lines + [f"Answer: {q['answer']}"])


def pretraining_docs(world_seeds, walks_per_world=300, seed=0, questions_per_world=0, chains_per_world=0):
    """Plain-text documents for the toy base model (the recipe's analogue of Nanbeige4-3B-Base, which the paper
    starts from): the articles of freshly generated worlds, each as a page, and chains of pages along random
    relation walks (a name read at the end of one page is the subject of the next, the copying a search agent
    does between an observation and its next query). Fresh worlds, never the shipped one (seed 0): names cannot
    be memorised, so next-token prediction rewards copying them from the context (induction), and no held-out
    question is answered from memory. With `questions_per_world`, also quiz pages: a multi-hop question, the pages
    along its path, and its answer (web text is full of question-and-answer pages; issue 13's experiment in
    picking the question's entity). With `chains_per_world`, also worked chains (`worked_chain`), 20 to a
    document. Returns [{"text", "domain": "pretrain"}] (nanbeige41/data.py)."""
    docs = []
    for world_seed in world_seeds:
        world = fresh_world(world_seed)
        index = {e["id"]: e for e in world["entities"]}
        graph = build_graph(world)
        page = lambda eid: f"{index[eid]['title']}\n{index[eid]['article']}"
        docs += [{"text": page(e["id"]), "domain": "pretrain"} for e in world["entities"]]
        rng = random.Random(f"{seed}:{world_seed}")
        ids = [e["id"] for e in world["entities"]]
        for _ in range(walks_per_world):
            head = rng.choice(ids)
            walk = random_walk(graph, head, rng.choice([1, 2, 3]), rng, entities=index) or []
            docs.append({"text": "\n\n".join(page(eid) for eid in [head] + [obj for _, obj in walk]),
                         "domain": "pretrain"})
        if questions_per_world:
            for q in synthesize_questions(world, questions_per_world, seed=world_seed, test_fraction=0.0):
                pages = [q["head"]] + [hop["entity"] for hop in q["path"] if hop["entity"]]
                docs.append({"text": f"Question: {q['question']}\n\n" + "\n\n".join(page(e) for e in pages)
                             + f"\n\nAnswer: {q['answer']}", "domain": "pretrain"})
        if chains_per_world:
            questions = synthesize_questions(world, chains_per_world, seed=world_seed + 1, test_fraction=0.0)
            chains = [c for c in (worked_chain(index, q) for q in questions) if c]
            docs += [{"text": "\n\n".join(chains[i:i + 20]), "domain": "pretrain"} for i in range(0, len(chains), 20)]
    return docs


REWRITE_PROMPT = """Rewrite a multi-hop quiz question so that it reads naturally and cannot be answered by one lookup.
Keep its meaning and its answer. Keep the name "{head}" exactly as written. Do not name any of: {hidden}.
Chain of facts behind it (for you only): {chain}
Question: {question}
Reply with one line: "Question: <the rewritten question>"."""


def rewrite_question(row, chat, world):
    """The paper's LLM step ("chains, along with their detailed temporal contexts, are fed into a robust LLM
    to synthesize intricate questions"): `chat(messages) -> text` (any OpenAI-compatible endpoint, e.g.
    search_agent.endpoint_chat) rewrites the template question. The rewrite is kept only if it passes
    checks an LLM cannot be trusted with: one question ending in "?", the head entity named verbatim, and
    neither the answer nor any intermediate entity of the chain named. Returns (row, accepted); the
    template question stays in `template_question`."""
    index = {e["id"]: e for e in world["entities"]}
    head = index[row["head"]]
    chain = [f"{head['title']} (page last modified {head['last_modified']})"]
    chain += [f"--{hop['relation']}--> {hop['title']}" for hop in row["path"]]
    hidden = [hop["title"] for hop in row["path"]]
    hidden += [f"{int(h):,}" for h in hidden if h.isdigit()]  # a number leaks with separators too
    reply = chat([{"role": "user", "content": REWRITE_PROMPT.format(
        head=head["title"], hidden=", ".join(hidden), chain=" ".join(chain), question=row["question"])}])
    found = re.findall(r"^\s*question\s*:\s*(.+?)\s*$", reply or "", flags=re.I | re.M)
    rewritten = found[-1] if found else ""
    leaked = [h for h in hidden if re.search(rf"\b{re.escape(h.lower())}\b", rewritten.lower())]
    if not rewritten.endswith("?") or head["title"] not in rewritten or leaked or rewritten.count("?") != 1:
        return row, False
    return {**row, "question": rewritten, "template_question": row["question"]}, True


# -----------------------------------------------------------------------------
# Files

def write_world(path, world):
    # One entity per line: small, diff-friendly, still plain JSON.
    head = {k: v for k, v in world.items() if k != "entities"}
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps(head, ensure_ascii=False)[:-1] + ', "entities": [\n')
        f.write(",\n".join(json.dumps(e, ensure_ascii=False) for e in world["entities"]))
        f.write("\n]}\n")


def load_world(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_questions(path, split=None):
    return [q for q in read_jsonl(path) if split is None or q["split"] == split]
