"""Cookbook: travel tasks over listings whose ratings and prices are text in objects keyed by name."""

from __future__ import annotations

from pte.testing.cookbook import Task, ref, step

D = "travel"


def _rated_hotels(city: str) -> list[dict[str, object]]:
    """Hotels of a city as records {key: name, value: text, rating: "4.2"} (a recurring recipe)."""
    return [
        step("h", "get_all_hotels_in_city", city=city),
        step("r", "get_rating_reviews_for_hotels", hotel_names=ref("h/hotel_names")),
        step("e", "entries", object=ref("r")),
        step(
            "x",
            "extract_into",
            records=ref("e/records"),
            field="value",
            pattern="Rating: (?P<rating>[0-9.]+)",
        ),
    ]


TASKS = [
    Task(
        "book_best_rated_hotel",
        D,
        "Book the highest-rated hotel in Paris from 2024-06-01 to 2024-06-03.",
        [
            *_rated_hotels("Paris"),
            step("s", "sort_records", records=ref("x/records"), by="rating", descending=True),
            step("top", "first", records=ref("s/records")),
            step(
                "b",
                "reserve_hotel",
                hotel=ref("top/record/key"),
                start_day="2024-06-01",
                end_day="2024-06-03",
            ),
        ],
        expect_outputs={"b": {"reserved": "Hotel Lumiere", "from": "2024-06-01", "to": "2024-06-03"}},
    ),
    Task(
        "hotels_rated_at_least",
        D,
        "Which hotels in London have a rating of at least 4.5?",
        [
            *_rated_hotels("London"),
            step("good", "filter_records", records=ref("x/records"), field="rating", op="ge", value="4.5"),
            step("n", "pluck", records=ref("good/records"), field="key"),
        ],
        result=ref("n/values"),
        expect_result=["Riverside Hotel", "The Regent"],
    ),
    Task(
        "cheapest_restaurant_of_cuisine",
        D,
        "Reserve a table at the cheapest French restaurant in Paris for 2024-06-02 19:00.",
        [
            step("rs", "get_all_restaurants_in_city", city="Paris"),
            step("cu", "get_cuisine_type_for_restaurants", restaurant_names=ref("rs/restaurant_names")),
            step("ce", "entries", object=ref("cu")),
            step(
                "fr",
                "filter_records",
                records=ref("ce/records"),
                field="value",
                op="has_word",
                value="French",
                ignore_case=True,
            ),
            step("names", "pluck", records=ref("fr/records"), field="key"),
            step("pr", "get_price_for_restaurants", restaurant_names=ref("names/values")),
            step("pe", "entries", object=ref("pr")),
            step(
                "px",
                "extract_into",
                records=ref("pe/records"),
                field="value",
                pattern="(?P<price>[0-9]+[.][0-9]+)",
            ),
            step("cheap", "extreme_by", records=ref("px/records"), field="price", which="min"),
            step(
                "res", "reserve_restaurant", restaurant=ref("cheap/record/key"), start_time="2024-06-02 19:00"
            ),
        ],
        expect_outputs={"res": {"reserved": "Chez Marie", "at": "2024-06-02 19:00"}},
    ),
    Task(
        "car_rental_cost",
        D,
        "What would 3 days with the cheapest car rental company in Los Angeles that has SUVs cost, "
        "and which company is it?",
        [
            step("c", "get_all_car_rental_companies_in_city", city="Los Angeles"),
            step("t", "get_car_types_available", company_names=ref("c/company_names")),
            step("te", "entries", object=ref("t")),
            step(
                "suv", "filter_records", records=ref("te/records"), field="value", op="contains", value="SUV"
            ),
            step("n", "pluck", records=ref("suv/records"), field="key"),
            step("p", "get_car_price_per_day", company_names=ref("n/values")),
            step("pe", "entries", object=ref("p")),
            step("cheap", "extreme_by", records=ref("pe/records"), field="value", which="min"),
            step(
                "cost", "calculator", expression="price * 3", variables={"price": ref("cheap/record/value")}
            ),
        ],
        result={"company": ref("cheap/record/key"), "total": ref("cost/value")},
        expect_result={"company": "Canyon Cars", "total": "165.0"},
    ),
    Task(
        "address_of_best_hotel",
        D,
        "What is the address of the best-rated hotel in London?",
        [
            *_rated_hotels("London"),
            step("top", "extreme_by", records=ref("x/records"), field="rating", which="max"),
            step("a", "get_hotels_address", hotel_name=ref("top/record/key")),
            step("v", "get_key", object=ref("a"), key=ref("top/record/key")),
        ],
        result=ref("v/value"),
        expect_result="2 Regent St",
    ),
    Task(
        "hotels_by_rating_and_price",
        D,
        "Which Paris hotels rated above 4 cost at most 200 a night at the top of their price range? "
        "Give their names, cheapest first.",
        [
            *_rated_hotels("Paris"),
            step("good", "filter_records", records=ref("x/records"), field="rating", op="gt", value=4),
            step("n", "pluck", records=ref("good/records"), field="key"),
            step("p", "get_hotels_prices", hotel_names=ref("n/values")),
            step("pe", "entries", object=ref("p")),
            step(
                "px",
                "extract_into",
                records=ref("pe/records"),
                field="value",
                pattern="(?P<low>[0-9]+) - (?P<high>[0-9]+)",
            ),
            step("ok", "filter_records", records=ref("px/records"), field="high", op="le", value=200),
            step("s", "sort_records", records=ref("ok/records"), by="low"),
            step("out", "pluck", records=ref("s/records"), field="key"),
        ],
        result=ref("out/values"),
        expect_result=["Le Marais Boutique", "Good Night Hotel"],
    ),
    # --- written the way a model writes them: descriptive ids; guarded: compiles under the default
    # guarded policy (ratings and reviews are untrusted: written by strangers).
    Task(
        "cheapest_car_rental_per_day_in_los_angeles",
        D,
        "Which car rental company in Los Angeles has the lowest price per day?",
        [
            step("rental_companies", "get_all_car_rental_companies_in_city", city="Los Angeles"),
            step(
                "prices_per_day",
                "get_car_price_per_day",
                company_names=ref("rental_companies/company_names"),
            ),
            step("cheapest_company", "top_key", object=ref("prices_per_day"), which="min"),
        ],
        result=ref("cheapest_company"),
        expect_result={"key": "Budget Wheels", "value": 48.0},
        guarded=True,
    ),
    Task(
        "price_ranges_of_paris_hotels_rated_at_least_4_5",
        D,
        "Give me the price range of every hotel in Paris rated at least 4.5.",
        [
            step("paris_hotels", "get_all_hotels_in_city", city="Paris"),
            step(
                "hotel_ratings",
                "get_rating_reviews_for_hotels",
                hotel_names=ref("paris_hotels/hotel_names"),
            ),
            step("hotel_prices", "get_hotels_prices", hotel_names=ref("paris_hotels/hotel_names")),
            step("rating_entries", "entries", object=ref("hotel_ratings")),
            step(
                "ratings_parsed",
                "extract_into",
                records=ref("rating_entries/records"),
                field="value",
                pattern="Rating: (?P<rating>[0-9.]+)",
            ),
            step(
                "well_rated_hotels",
                "filter_records",
                records=ref("ratings_parsed/records"),
                field="rating",
                op="ge",
                value="4.5",
            ),
            step("price_entries", "entries", object=ref("hotel_prices")),
            step(
                "well_rated_with_prices",
                "join_records",
                left=ref("well_rated_hotels/records"),
                right=ref("price_entries/records"),
                left_field="key",
                right_field="key",
            ),
            step("price_records", "pluck", records=ref("well_rated_with_prices/records"), field="right"),
        ],
        result=ref("price_records/values"),
        expect_result=[
            {"key": "Hotel Lumiere", "value": "Price range: 210 - 260"},
            {"key": "Good Night Hotel", "value": "Price range: 150 - 170"},
        ],
        guarded=True,
    ),
]
