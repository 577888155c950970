//===- JsonTest.cpp - JsonDocument positions and helpers ------------------===//

#include "zeroc/Support/Json.h"

#include <gtest/gtest.h>

using namespace zeroc;

TEST(JsonDocument, SyntaxErrorReportsLineAndColumn) {
  auto doc = JsonDocument::parse("{\n  \"a\": 1,\n  \"b\": ]\n}\n", "cfg.json");
  ASSERT_FALSE(doc);
  EXPECT_EQ(doc.error().file, "cfg.json");
  EXPECT_EQ(doc.error().line, 3);
  EXPECT_EQ(doc.error().column, 8);
  EXPECT_NE(doc.error().message.find("invalid JSON"), std::string::npos);
  EXPECT_EQ(doc.error().str().rfind("cfg.json:3:8: error: invalid JSON", 0), 0u)
      << doc.error().str();
}

// Each syntax error names what is missing, at the place to fix it.
// Found by the cluster fuzz target: 10^4 nested '[' overflowed the stack in
// the syntax checker. Deeper than kMaxJsonDepth is refused, located.
TEST(JsonDocument, NestingDeeperThanTheLimitIsALocatedError) {
  std::string deep =
      "{\"a\": \"[[[[\", \"b\": " + std::string(size_t(kMaxJsonDepth), '[');
  auto ok = JsonDocument::parse(std::string(size_t(kMaxJsonDepth), '[') +
                                    std::string(size_t(kMaxJsonDepth), ']'),
                                "ok.json");
  EXPECT_TRUE(bool(ok)) << ok.error().str();
  auto bad = JsonDocument::parse(deep + std::string(100000, '['), "deep.json");
  ASSERT_FALSE(bad);
  // The brackets inside the string do not count; with the '{', the 256th
  // '[' after "b" opens the 257th level.
  EXPECT_EQ(bad.error().str(),
            "deep.json:1:" + std::to_string(19 + kMaxJsonDepth) +
                ": error: invalid JSON: arrays and objects nested more than "
                "256 deep (zeroc's formats need a handful of levels)");
}

TEST(JsonDocument, SyntaxErrorsSayWhatIsMissingAndWhere) {
  struct Case {
    const char *text;
    const char *error; ///< Without "t.json:" and "error: invalid JSON: ".
  };
  const Case cases[] = {
      // Where the comma belongs: after the value of "a".
      {"{\n  \"a\": 1\n  \"b\": 2\n}\n",
       "2:9: missing ',' between members \"a\" and \"b\""},
      // At the comma itself.
      {"{\n  \"a\": 1,\n  \"b\": 2,\n}\n", "3:9: trailing ',' before '}'"},
      {"{\"a\": [1, 2,]}", "1:12: trailing ',' before ']'"},
      {"{\"a\": [1 2]}", "1:9: missing ',' between elements"},
      {"{\"a\": [1, 2}",
       "1:12: missing closing ']' for the array opened at 1:7"},
      {"{\"a\": {\"b\": 1}",
       "1:15: missing closing '}' for the object opened at 1:1"},
      // At the opening quote.
      {"{\"a\": \"abc}\n", "1:7: unterminated string: missing closing '\"'"},
      {"{\"a\" 1}", "1:6: missing ':' after the key \"a\""},
      {"{a: 1}", "1:2: keys need double quotes"},
      {"{\"a\": 1,, \"b\": 2}",
       "1:9: expected a key in double quotes, found ','"},
      {"{\"a\": }", "1:7: missing the value of \"a\""},
      {"{\n  \"a\": 1 // why\n}", "2:10: comments are not allowed in JSON"},
      {"{\"a\": 01}", "1:7: a number cannot start with 0"},
      {"{} x", "1:4: unexpected 'x' after the end of the document"},
      {"", "1:1: the document is empty; expected a JSON value"},
      // Not a syntax error for the checker; nlohmann throws out_of_range.
      {"{\"a\": 1e999}", "1:7: the number 1e999 is too large for a double"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.text);
    auto doc = JsonDocument::parse(c.text, "t.json");
    ASSERT_FALSE(doc);
    std::string expected = c.error;
    size_t space = expected.find(' ');
    EXPECT_EQ(doc.error().str(),
              "t.json:" + expected.substr(0, space - 1) +
                  ": error: invalid JSON: " + expected.substr(space + 1));
  }
}

TEST(Diagnostic, CarriesFurtherErrorsAndPrintsThemAll) {
  Diagnostic all = Diagnostic::combine({Diagnostic{"a.json", 2, 3, "first"},
                                        Diagnostic{"a.json", 5, 1, "second"},
                                        Diagnostic{"", 0, 0, "third"}});
  EXPECT_EQ(all.count(), 3u);
  EXPECT_EQ(all.message, "first");
  EXPECT_EQ(all.str(), "a.json:2:3: error: first\n"
                       "a.json:5:1: error: second\n"
                       "error: third");
  // A single error prints as before.
  EXPECT_EQ(Diagnostic({"a.json", 1, 1, "only"}).str(),
            "a.json:1:1: error: only");
}

TEST(JsonDocument, SpellingQuotesAValueAsWritten) {
  auto doc = JsonDocument::parse(
      "{\"a\": {\"n\": 18446744073709551615, \"f\": 5e8, \"l\": [1.50]}}",
      "t.json");
  ASSERT_TRUE(doc) << doc.error().str();
  EXPECT_EQ(doc->spelling("/a/n"), "18446744073709551615");
  EXPECT_EQ(doc->spelling("/a/f"), "5e8");
  EXPECT_EQ(doc->spelling("/a/l/0"), "1.50");
  EXPECT_EQ(doc->spelling("/a/missing"), std::nullopt);
}

TEST(JsonDocument, LocatesNestedMembersAndElements) {
  const char *text = R"({
  "name": "x",
  "zero_optimization": {
    "stage": 3,
    "offload_param": {"device": "cpu"}
  },
  "list": [10, {"k": [1, 2]}]
})";
  auto doc = JsonDocument::parse(text, "t.json");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->locate("/zero_optimization/stage"), std::make_pair(4, 5));
  EXPECT_EQ(doc->locate("/zero_optimization/offload_param/device"),
            std::make_pair(5, 23));
  EXPECT_EQ(doc->locate("/list/1/k"), std::make_pair(7, 17));
  // A missing member falls back to the closest enclosing one that exists.
  EXPECT_EQ(doc->locate("/zero_optimization/nope"), std::make_pair(3, 3));
  Diagnostic d = doc->error("/name", "bad name");
  EXPECT_EQ(d.str(), "t.json:2:3: error: bad name");
}

TEST(JsonDocument, SkipsStringsWithBracesAndEscapes) {
  auto doc = JsonDocument::parse(R"({"a": "}{][\"", "b": {"c": 1}})", "s.json");
  ASSERT_TRUE(doc);
  EXPECT_EQ(doc->locate("/b/c"), std::make_pair(1, 23));
}

TEST(JsonDocument, MissingFileIsAnError) {
  auto doc = JsonDocument::load("/nonexistent/zeroc.json");
  ASSERT_FALSE(doc);
  EXPECT_EQ(doc.error().str(),
            "/nonexistent/zeroc.json: error: cannot open file");
}

TEST(JsonHelpers, DescribeType) {
  EXPECT_EQ(describeJsonType(nlohmann::json(3)), "an integer");
  EXPECT_EQ(describeJsonType(nlohmann::json(3.5)), "a number with a fraction");
  EXPECT_EQ(describeJsonType(nlohmann::json("x")), "a string");
  EXPECT_EQ(describeJsonType(nlohmann::json()), "null");
}

TEST(JsonHelpers, ClosestMatchFindsTyposOnly) {
  std::vector<std::string> keys = {"reduce_bucket_size",
                                   "allgather_bucket_size",
                                   "stage3_prefetch_bucket_size"};
  EXPECT_EQ(closestMatch("reduce_bucket_sise", keys), "reduce_bucket_size");
  EXPECT_EQ(closestMatch("prefetch_bucket_size", keys),
            "stage3_prefetch_bucket_size");
  EXPECT_EQ(closestMatch("completely_different", keys), std::nullopt);
}

//===----------------------------------------------------------------------===//
// JsonFieldReader: the plan's and the checkpoint manifest's typed reader.
//===----------------------------------------------------------------------===//

#include "zeroc/Support/JsonReader.h"

TEST(JsonFieldReader, NamesPathsWithIndicesInBrackets) {
  EXPECT_EQ(JsonFieldReader::name(JsonPath()), "(root)");
  EXPECT_EQ(
      JsonFieldReader::name(JsonPath() / "phases" / "0" / "ops" / "3" / "kind"),
      "phases[0].ops[3].kind");
}

TEST(JsonFieldReader, KeepsTheFirstFailureWithItsLocation) {
  auto doc = JsonDocument::parse(
      "{\n  \"a\": [1, -2, \"x\"],\n  \"b\": \"f64\"\n}", "t.json");
  ASSERT_TRUE(bool(doc));
  JsonFieldReader r(*doc, "thing");
  std::vector<int64_t> a = r.integers(doc->root(), JsonPath(), "a");
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->str(),
            "t.json:2:12: error: thing a[1]: expected an integer >= 0, "
            "found -2");
  EXPECT_EQ(a, std::vector<int64_t>{1});
  // Later failures do not replace it; accessors return defaults.
  EXPECT_EQ(r.dtype(doc->root(), JsonPath()), DType::F32);
  EXPECT_EQ(r.integer(doc->root(), JsonPath(), "missing"), 0);
  EXPECT_NE(r.error->str().find("a[1]"), std::string::npos);
}

TEST(JsonFieldReader, ChecksTypesAndAllowedValues) {
  auto doc =
      JsonDocument::parse(R"({"b": "f64", "k": "maybe", "o": 3})", "t.json");
  ASSERT_TRUE(bool(doc));
  {
    JsonFieldReader r(*doc, "plan");
    r.oneOf(doc->root(), JsonPath(), "k", {"yes", "no"});
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->str().find(
                  "plan k: unknown value \"maybe\", expected one of yes, no"),
              std::string::npos);
  }
  {
    JsonFieldReader r(*doc, "plan");
    EXPECT_EQ(r.string(doc->root(), JsonPath(), "absent", /*optional=*/true),
              "");
    EXPECT_FALSE(r.error);
    r.member(doc->root()["o"], JsonPath() / "o", "x");
    ASSERT_TRUE(r.error);
    EXPECT_NE(r.error->str().find("plan o: expected an object, found"),
              std::string::npos);
  }
}

#include "zeroc/Support/Format.h"

// The tables' units, one definition for inspect's and --what-if's tables.
TEST(Format, NumbersAndDurationsAsTablesPrintThem) {
  EXPECT_EQ(zeroc::groupDigits(124439808), "124,439,808");
  EXPECT_EQ(zeroc::humanBytes(1536), "1.50 KiB");
  EXPECT_EQ(zeroc::humanSeconds(2.4944), "2.494 s");
  EXPECT_EQ(zeroc::humanSeconds(0.056258), "56.26 ms");
  EXPECT_EQ(zeroc::humanSeconds(3.44e-6), "3.4 us");
  EXPECT_EQ(zeroc::humanSeconds(0), "0 s");
}

TEST(Format, EndsWith) {
  EXPECT_TRUE(zeroc::endsWith("tokens.u16", ".u16"));
  EXPECT_TRUE(zeroc::endsWith(".bin", ".bin"));
  EXPECT_TRUE(zeroc::endsWith("x", ""));
  EXPECT_FALSE(zeroc::endsWith("bin", ".bin"));
  EXPECT_FALSE(zeroc::endsWith("tokens.u16x", ".u16"));
}
