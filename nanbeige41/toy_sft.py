"""Toy SFT conversations for two of the five domains of paper section 2.1.1, from a seeded random.Random:
- stem: arithmetic and word problems with short reasoning (`make_stem`);
- tool: function calling with the family's tool-call format: single and parallel calls, multi-step calls, answering
  without a tool, asking for a missing argument (`make_tool`).
data_synth.py toy mixes them with the code, search and general domains into the shipped corpus.
"""
import datetime
import json
import random


# -----------------------------------------------------------------------------
# stem: arithmetic and word problems with short reasoning

NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fay", "Gus", "Hana", "Ivo", "Jun", "Kira", "Leo", "Mia", "Nils",
         "Omar", "Pia", "Quin", "Rosa", "Sami", "Tara"]
ITEMS = ["apple", "book", "coin", "marble", "pencil", "sticker", "card", "shell", "stamp", "cookie"]


def _stem_add(rng):
    a, b = rng.randint(10, 999), rng.randint(10, 999)
    if rng.random() < 0.5:
        return f"What is {a} + {b}?", f"{a} + {b} = {a + b}.", a + b
    a, b = max(a, b), min(a, b)
    return f"What is {a} - {b}?", f"{a} - {b} = {a - b}.", a - b


def _stem_mul(rng):
    a, b = rng.randint(2, 12), rng.randint(11, 99)
    tens, ones = b // 10 * 10, b % 10
    reasoning = f"{a} * {b} = {a} * {tens} + {a} * {ones} = {a * tens} + {a * ones} = {a * b}."
    return f"What is {a} * {b}?", reasoning, a * b


def _stem_equation(rng):
    a, x, b = rng.randint(2, 9), rng.randint(1, 30), rng.randint(1, 50)
    c = a * x + b
    reasoning = f"Subtract {b} from both sides: {a}x = {c} - {b} = {c - b}. Divide by {a}: x = {c - b} / {a} = {x}."
    return f"Solve for x: {a}x + {b} = {c}.", reasoning, x


def _stem_percent(rng):
    p, n = rng.choice([10, 20, 25, 50, 75]), rng.randint(1, 40) * 20
    r = n * p // 100
    return f"What is {p}% of {n}?", f"{p}% of {n} is {n} * {p} / 100 = {n * p} / 100 = {r}.", r


def _stem_speed(rng):
    v, t = rng.randint(20, 120), rng.randint(2, 9)
    d = v * t
    return (f"A train travels {d} km in {t} hours at a constant speed. What is its speed in km per hour?",
            f"Speed is distance divided by time: {d} / {t} = {v}.", v)


def _stem_word(rng):
    name, item = rng.choice(NAMES), rng.choice(ITEMS)
    a, b = rng.randint(3, 60), rng.randint(2, 40)
    c = rng.randint(1, a + b)
    s = a + b
    return (f"{name} has {a} {item}s, buys {b} more and then gives away {c}. How many {item}s does {name} have now?",
            f"{name} starts with {a}. After buying {b}: {a} + {b} = {s}. After giving away {c}: {s} - {c} = {s - c}.",
            s - c)


def _stem_area(rng):
    w, h = rng.randint(2, 30), rng.randint(2, 30)
    return (f"A rectangle is {w} m wide and {h} m long. What is its area in square metres?",
            f"Area is width times length: {w} * {h} = {w * h}.", w * h)


STEM_FAMILIES = [_stem_add, _stem_mul, _stem_equation, _stem_percent, _stem_speed, _stem_word, _stem_area]


def make_stem(rng, n):
    records = []
    for i in range(n):
        question, reasoning, answer = STEM_FAMILIES[i % len(STEM_FAMILIES)](rng)
        records.append(dict(messages=[
            {"role": "user", "content": question},
            {"role": "assistant", "reasoning_content": reasoning, "content": f"The answer is {answer}."},
        ], domain="stem", answer=str(answer)))
    return records


# -----------------------------------------------------------------------------
# tool: a few fictional tools, their results computed from a fixed fictional world

CITIES = ["Varo", "Lintel", "Okapa", "Brisk", "Tamsin", "Quora Bay", "Eldham", "Mireval", "Sunhold", "Petrak",
          "Caldo", "Ynes", "Harrow Point", "Zemla", "Ostra"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy"]
CURRENCIES = {"VAL": 1.0, "KRO": 0.5, "DUN": 2.5, "PEB": 0.2, "MAR": 4.0}  # value of one unit in VAL
PRODUCTS = ["lamp", "kettle", "backpack", "umbrella", "notebook", "headphones", "teapot", "bicycle bell"]

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"}, "from_currency": {"type": "string"}, "to_currency": {"type": "string"}},
            "required": ["amount", "from_currency", "to_currency"]}}},
    {"type": "function", "function": {
        "name": "get_price", "description": "Price of a product in the shop, in VAL.",
        "parameters": {"type": "object", "properties": {"product": {"type": "string"}}, "required": ["product"]}}},
    {"type": "function", "function": {
        "name": "add_days", "description": "The date a number of days after a date (YYYY-MM-DD).",
        "parameters": {"type": "object", "properties": {"date": {"type": "string"}, "days": {"type": "integer"}},
                       "required": ["date", "days"]}}},
]


def _weather(city):
    r = random.Random("weather:" + city)  # a fixed fictional world: same city, same weather
    return {"city": city, "temperature_c": r.randint(-5, 35), "condition": r.choice(CONDITIONS)}


def _price(product):
    return {"product": product, "price": random.Random("price:" + product).randint(5, 200), "currency": "VAL"}


def _call(name, arguments):
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_weather(rng):
    city = rng.choice(CITIES)
    w = _weather(city)
    return [
        {"role": "user", "content": f"What is the weather like in {city} right now?"},
        {"role": "assistant", "reasoning_content": f"I need the current weather in {city}, so I call get_weather.",
         "content": "", "tool_calls": [_call("get_weather", {"city": city})]},
        {"role": "tool", "content": json.dumps(w)},
        {"role": "assistant", "reasoning_content": "The tool returned the temperature and the condition.",
         "content": f"It is {w['condition']} in {city} at {w['temperature_c']} degrees Celsius."},
    ]


def _tool_compare(rng):
    a, b = rng.sample(CITIES, 2)
    wa, wb = _weather(a), _weather(b)
    if wa["temperature_c"] == wb["temperature_c"]:
        answer = f"Both are at {wa['temperature_c']} degrees Celsius."
    else:
        warmer = a if wa["temperature_c"] > wb["temperature_c"] else b
        answer = (f"{warmer} is warmer: {a} has {wa['temperature_c']} and {b} has {wb['temperature_c']} "
                  "degrees Celsius.")
    return [
        {"role": "user", "content": f"Which is warmer right now, {a} or {b}?"},
        {"role": "assistant", "reasoning_content": "I need the weather in both cities; the two calls are independent.",
         "content": "", "tool_calls": [_call("get_weather", {"city": a}), _call("get_weather", {"city": b})]},
        {"role": "tool", "content": json.dumps(wa)},
        {"role": "tool", "content": json.dumps(wb)},
        {"role": "assistant", "reasoning_content": f"{a}: {wa['temperature_c']}, {b}: {wb['temperature_c']}.",
         "content": answer},
    ]


def _tool_currency(rng):
    src, dst = rng.sample(sorted(CURRENCIES), 2)
    amount = rng.randint(1, 50) * 10
    value = round(amount * CURRENCIES[src] / CURRENCIES[dst], 2)
    return [
        {"role": "user", "content": f"How much is {amount} {src} in {dst}?"},
        {"role": "assistant", "reasoning_content": f"I convert {amount} {src} to {dst} with convert_currency.",
         "content": "", "tool_calls": [_call("convert_currency",
                                             {"amount": amount, "from_currency": src, "to_currency": dst})]},
        {"role": "tool", "content": json.dumps({"amount": value, "currency": dst})},
        {"role": "assistant", "reasoning_content": "The conversion is done.",
         "content": f"{amount} {src} is {value} {dst}."},
    ]


def _tool_price_total(rng):
    product, qty = rng.choice(PRODUCTS), rng.randint(2, 6)
    p = _price(product)
    return [
        {"role": "user", "content": f"I want to buy {qty} of the {product}. How much will that cost?"},
        {"role": "assistant", "reasoning_content": f"I need the unit price of the {product} first.",
         "content": "", "tool_calls": [_call("get_price", {"product": product})]},
        {"role": "tool", "content": json.dumps(p)},
        {"role": "assistant", "reasoning_content": f"{qty} * {p['price']} = {qty * p['price']}.",
         "content": f"{qty} of the {product} cost {qty * p['price']} VAL."},
    ]


def _tool_date(rng):
    start = datetime.date(2026, 1, 1) + datetime.timedelta(days=rng.randint(0, 364))
    days = rng.randint(1, 90)
    end = start + datetime.timedelta(days=days)
    return [
        {"role": "user", "content": f"What date is {days} days after {start.isoformat()}?"},
        {"role": "assistant", "reasoning_content": "Calendar arithmetic is easy to get wrong; I use add_days.",
         "content": "", "tool_calls": [_call("add_days", {"date": start.isoformat(), "days": days})]},
        {"role": "tool", "content": json.dumps({"date": end.isoformat()})},
        {"role": "assistant", "reasoning_content": "The tool gave the date.",
         "content": f"{days} days after {start.isoformat()} is {end.isoformat()}."},
    ]


def _tool_no_call(rng):
    a, b = rng.randint(2, 20), rng.randint(2, 20)
    return [
        {"role": "user", "content": f"What is {a} plus {b}?"},
        {"role": "assistant", "reasoning_content": f"No tool is needed: {a} + {b} = {a + b}.",
         "content": f"{a} plus {b} is {a + b}."},
    ]


def _tool_missing_argument(rng):
    amount = rng.randint(1, 50) * 10
    src = rng.choice(sorted(CURRENCIES))
    return [
        {"role": "user", "content": f"Please convert {amount} {src} for me."},
        {"role": "assistant", "reasoning_content": "convert_currency needs a target currency, which is missing.",
         "content": f"Which currency should I convert {amount} {src} into? I know {', '.join(sorted(CURRENCIES))}."},
    ]


TOOL_FAMILIES = [_tool_weather, _tool_compare, _tool_currency, _tool_price_total, _tool_date, _tool_weather,
                 _tool_currency, _tool_no_call, _tool_missing_argument]


TOOL_SYSTEM = "You are a helpful assistant. Call a tool when it helps; answer directly when it does not."


def make_tool(rng, n):
    """Each record offers the tools it calls plus one distractor, in random order (and not all four every time:
    the schemas are the longest part of a toy tool conversation)."""
    records = []
    for i in range(n):
        messages = TOOL_FAMILIES[i % len(TOOL_FAMILIES)](rng)
        used = {c["function"]["name"] for m in messages for c in m.get("tool_calls", [])}
        names = sorted(used) + [rng.choice(sorted({t["function"]["name"] for t in TOOLS} - used))]
        if "convert_currency" not in names and "Which currency" in messages[-1]["content"]:
            names[-1] = "convert_currency"  # the missing-argument case must offer the tool it asks about
        rng.shuffle(names)
        tools = [t for name in names for t in TOOLS if t["function"]["name"] == name]
        records.append(dict(messages=[{"role": "system", "content": TOOL_SYSTEM}] + messages, tools=tools,
                            domain="tool"))
    return records
